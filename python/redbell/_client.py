"""The asyncio client: connections, scripts, the wait loop and the renewal
task. The wire protocol (keys, scripts, messages, duties) is PROTOCOL.md's;
this module follows its "Client duties" item by item, cited at each line
that carries one out.

The wait loop (``Client._acquire``)::

    attempt with no member                 fast path: one script call, no SUBSCRIBE
    join the hub (local)
    loop {
        subscribed? else subscribe (confirmed)   duty 3: before relying on a message
        clear the waiter's event                 duty 4: a message from here on is kept
        attempt (the member only if this waiter holds the client's place, duty 6)
        park: woken | turn | park ms | standby window | deadline   duty 7
    }

Cancel safety: ``asyncio.CancelledError`` (or a lost connection) while an
attempt is in flight releases its token in the background (duty 10) and
passes the member on (duty 9), so nothing is left behind.
"""

import asyncio
import functools
import math
import uuid
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Dict, List, Optional, Set

import redis.asyncio as aioredis
from redis import exceptions as rexc

from . import _scripts
from ._calls import (
    CLAIM_MS, DEFAULT_LEASE, FENCE_TTL_MS, HANDOFF_MS, MAX_PARK, PARK_MS, POOL_SIZE,
    QUEUE_GRACE_MS, RENEW_BATCH, RESPONSE_TIMEOUT, RETRY_AFTER, RW_WINDOW_MS, SEM_RESERVE_MS,
    _answered, _Call, _Keys, _KINDS, _map_error, _release_code, _RENEW_BY, _Reply,
)
from ._guard import Guard
from ._handles import FairMutex, Mutex, Semaphore
from ._hub import Channel, Hub, Waiter
from ._mux import Mux, pack
from .errors import (
    ClientClosed, InvalidLease, InvalidName, InvalidPermits, KindConflict,
    NoPermission, PermitsMismatch, ProtocolMismatch, RedisError,
    Timeout, WrongType,
)

if TYPE_CHECKING:
    from ._election import Election
    from ._rwlock import RwLock


class Client:
    """A redbell client: one Redis connection pool, one pub/sub connection
    (opened by the first waiter), one renewal task. Create it with
    :func:`connect`; close it with :meth:`aclose`."""

    def __init__(self, url: Optional[str], prefix: str = "redbell", *,
                 _redis: Any = None, _hub: Optional[Callable[..., Any]] = None,
                 _sharded: bool = False) -> None:
        # _redis, _hub, _sharded: a topology's command client, a factory
        # of its hub (given the orphan callback) and whether it runs the
        # SPUBLISH scripts (connect_sentinel, connect_cluster).
        if not prefix or ":" in prefix or "{" in prefix or "}" in prefix:
            raise InvalidName(f"prefix {prefix!r}: non-empty, without ':', '{{' or '}}'")
        self.prefix = prefix
        self.id = uuid.uuid4().hex
        """The client id ``C``: 32 lowercase hex digits, random per instance."""
        if _redis is None:
            # Script calls go through the mux (one connection of this pool);
            # the pool itself carries only the connect PING. Not a
            # BlockingConnectionPool: redis-py 5.0.1's deadlocks for good
            # once a connect fails (see _sentinel.py).
            _redis = aioredis.Redis(connection_pool=aioredis.ConnectionPool.from_url(
                url, protocol=2, socket_timeout=RESPONSE_TIMEOUT,
                socket_connect_timeout=RESPONSE_TIMEOUT, max_connections=POOL_SIZE))
        self._redis = _redis
        self._hub = (_hub(self._orphan) if _hub is not None
                     else Hub(url, self._orphan, socket_connect_timeout=RESPONSE_TIMEOUT))
        self._scripts = {s.name: (s.sharded() if _sharded else s)
                         for s in _scripts.all_scripts()}
        self._on_close: List[Callable[[], Any]] = []
        """Coroutine functions aclose awaits last (a topology's own clients)."""
        self._holds: Set[Guard] = set()
        self._background: Set[asyncio.Task] = set()
        self._renewal: Optional[asyncio.Task] = None
        self._renew_now = asyncio.Event()
        self._renew_at = -math.inf
        """Loop time the renewal loop sleeps until (-inf while it runs)."""
        self._renew_timer: Optional[asyncio.TimerHandle] = None
        self._closed = False
        pool = getattr(self._redis, "connection_pool", None)
        self._mux: Optional[Mux] = None if pool is None else Mux(pool, RESPONSE_TIMEOUT)
        """Script calls go here when the command client has one connection
        pool (single server, Sentinel); else through ``_redis`` per call."""

    # -- scripts -----------------------------------------------------------

    async def _call(self, name: str, keys: List[str], args: List[Any]) -> Any:
        """EVALSHA, then EVAL after NOSCRIPT; ARGV[1] is the version."""
        return await self._request(name, keys, args)

    def _request(self, name: str, keys: List[str], args: List[Any],
                 conv: Optional[Callable[[Any], Any]] = None) -> _Call:
        """Send script ``name`` now; the call gets its reply (through
        ``conv``) or the redbell exception it ended with. Calls of one task
        reach the server in the order they were made."""
        if self._closed:
            raise ClientClosed("client closed")
        s = self._scripts[name]
        argv = [_scripts.PROTOCOL_VERSION, *args]
        call = _Call()
        if self._mux is None:
            # Sent or not, redis-py does not tell (a cluster connection
            # sends a call again on a new connection, whose refusal would
            # hide the first send): taken as sent.
            call.written = True
            task = asyncio.ensure_future(self._call_pooled(s, keys, argv, conv))
            task.add_done_callback(lambda t: call.settle(
                None if t.cancelled() else t.result() if t.exception() is None else None,
                ClientClosed("call cancelled") if t.cancelled() else t.exception()))
            return call
        self._mux.send(pack(("EVALSHA", s.sha1, len(keys), *keys, *argv)),
                       functools.partial(self._answered, call, s, keys, argv, conv, True, False))
        return call

    def _answered(self, call: _Call, s: _scripts.Script, keys: List[str],
                  argv: List[Any], conv: Optional[Callable[[Any], Any]], first: bool,
                  resent: bool, reply: Any, e: Optional[Exception], sent: bool) -> None:
        """The mux's sink of one script call: settles ``call``."""
        call.written |= sent
        if e is None:
            if resent and conv is _release_code and reply != 1:
                # The first send's reply was lost with its connection: it
                # may have released (then this one finds nothing of its
                # own), or the hold may have ended before. Not NotHeld,
                # which would say the hold had ended.
                call.settle(None, RedisError(
                    "the release's reply was lost with its connection; sent again, it "
                    "found the lock not held: released by the first send, or expired"))
                return
            try:
                call.settle(reply if conv is None else conv(reply), None)
            except Exception as ce:  # a reply of the wrong shape
                call.settle(None, RedisError(f"unexpected reply: {ce}"))
        elif first and isinstance(e, rexc.NoScriptError) and self._mux is not None:
            self._mux.send(pack(("EVAL", s.source, len(keys), *keys, *argv)),
                           functools.partial(self._answered, call, s, keys, argv, conv, False,
                                             resent))
        elif (not resent and isinstance(e, rexc.ConnectionError) and self._mux is not None
              and not self._closed):
            # The connection died under the call (CLIENT KILL, a restart,
            # the response timeout): every script is idempotent (PROTOCOL.md,
            # "Failure rules": a re-sent acquire finds its own token, a
            # re-sent release or extend changes nothing), so it goes once
            # more on the fresh connection the mux opens. A release that
            # met a killed connection would otherwise leave the lock held
            # for its lease.
            self._mux.send(pack(("EVALSHA", s.sha1, len(keys), *keys, *argv)),
                           functools.partial(self._answered, call, s, keys, argv, conv, True,
                                             True))
        else:
            call.settle(None, _map_error(e) if isinstance(e, rexc.RedisError) else e)

    async def _call_pooled(self, s: _scripts.Script, keys: List[str], argv: List[Any],
                           conv: Optional[Callable[[Any], Any]]) -> Any:
        try:
            try:
                r = await self._redis.evalsha(s.sha1, len(keys), *keys, *argv)
            except rexc.NoScriptError:
                r = await self._redis.eval(s.source, len(keys), *keys, *argv)
        except rexc.RedisError as e:
            raise _map_error(e) from e
        except Exception as e:
            # redis-py's cluster client failing in itself: 8.1 raises
            # AttributeError for a node connection closed under its
            # handshake while the slot map is read again.
            raise RedisError(f"redis-py failed: {type(e).__name__}: {e}") from e
        return r if conv is None else conv(r)

    def _spawn(self, coro) -> None:
        t = asyncio.ensure_future(coro)
        self._background.add(t)
        t.add_done_callback(self._background.discard)

    async def _quiet(self, coro) -> None:
        try:
            await coro
        except Exception:
            pass  # the lease or the queue entry's expiry ends it

    async def _retried(self, make: Callable[[], Awaitable[Any]]) -> None:
        """Background work (a release, a pass-on): ``make()`` awaited; one
        that fails with :class:`RedisError` (the connection lost, a reply
        timed out, a node paused or failing over) is made again after
        ``RETRY_AFTER``'s pauses in turn, then given up: the lease or the
        queue entry's expiry ends it. A pass-on given up too soon leaves a
        waiter parked past a free lock: the release that woke a waiter
        this client no longer has sends no standby to this client's other
        waiters, since passing it on is this client's duty. Any other
        error ends it at once (a refusal: trying again changes nothing).
        Every script is idempotent, so a retry of one that ran is a no-op."""
        for pause in (*RETRY_AFTER, None):
            try:
                await make()
                return
            except RedisError:
                if pause is None:
                    return
                await asyncio.sleep(pause)
            except Exception:
                return

    def _attempt(self, kind: str, k: _Keys, token: str, lease_ms: int, member: str,
                 arrival: str, permits: Optional[int]) -> _Call:
        """Send one acquire attempt now (see ``_request``)."""
        if kind in ("mutex", "election"):
            return self._request("acquire", [k.b, k.fence, k.waiters, k.readers, k.holders],
                                 [token, lease_ms, FENCE_TTL_MS, member, QUEUE_GRACE_MS,
                                  PARK_MS, HANDOFF_MS, _KINDS[kind][0]], _Reply)
        if kind == "read":
            return self._request("rw_read_acquire",
                                 [k.b, k.readers, k.writers, k.fence, k.permits, k.holders],
                                 [token, lease_ms, PARK_MS], _Reply)
        if kind == "write":
            return self._request("rw_write_acquire",
                                 [k.b, k.readers, k.writers, k.fence, k.rw, k.permits,
                                  k.holders],
                                 [token, lease_ms, FENCE_TTL_MS, member, QUEUE_GRACE_MS,
                                  PARK_MS], _Reply)
        if kind == "fair":
            return self._request("fair_acquire",
                                 [k.b, k.fence, k.fifo, k.handoff, k.readers, k.holders],
                                 [token, lease_ms, FENCE_TTL_MS, member, QUEUE_GRACE_MS,
                                  PARK_MS, k.wake, CLAIM_MS, arrival], _Reply)
        return self._request("sem_acquire",
                             [k.holders, k.fence, k.queue, k.queue_expiry, k.permits,
                              k.b, k.readers],
                             [token, lease_ms, FENCE_TTL_MS, member, QUEUE_GRACE_MS,
                              PARK_MS, k.wake, permits, SEM_RESERVE_MS, arrival], _Reply)

    def _release(self, kind: str, k: _Keys, token: str,
                 permits: Optional[int]) -> _Call:
        """Send the release now; the future gets its code (1 / 0 / -1)."""
        if kind in ("mutex", "election"):
            return self._request("release", [k.b, k.waiters], [token, k.wake, HANDOFF_MS],
                                 _release_code)
        if kind == "read":
            return self._request("rw_read_release", [k.readers, k.rw, k.writers],
                                 [token, RW_WINDOW_MS], _release_code)
        if kind == "write":
            return self._request("rw_write_release", [k.b, k.rw, k.writers],
                                 [token, RW_WINDOW_MS], _release_code)
        if kind == "fair":
            return self._request("fair_release", [k.b, k.fence, k.fifo, k.handoff],
                                 [token, k.wake, CLAIM_MS, FENCE_TTL_MS], _release_code)
        return self._request("sem_release", [k.holders, k.queue, k.queue_expiry, k.permits],
                             [token, k.wake, permits, SEM_RESERVE_MS], _release_code)

    def _pass(self, kind: str, k: _Keys, member: str,
              permits: Optional[int]) -> _Call:
        """Send the kind's pass script for ``member`` now (a reader passes
        nothing: an answered call)."""
        if kind in ("mutex", "election"):
            return self._request("pass", [k.b, k.waiters], [member, k.wake, HANDOFF_MS])
        if kind == "write":
            return self._request("rw_pass", [k.writers, k.rw, k.b, k.readers], [member])
        if kind == "read":
            return _answered(None)
        if kind == "fair":
            return self._request("fair_pass", [k.b, k.fence, k.fifo, k.handoff],
                                 [member, k.wake, CLAIM_MS, FENCE_TTL_MS])
        return self._request("sem_pass", [k.holders, k.queue, k.queue_expiry, k.permits],
                             [member, k.wake, permits, SEM_RESERVE_MS])

    async def _park(self, w: Waiter, park_ms: int, deadline: Optional[float]) -> None:
        """Park ``w`` after a failed attempt whose reply said ``park_ms``
        (-1: no expiry, park PARK_MS): until a message or a turn for it,
        its standby's window, the park's bound (duty 7) or ``deadline``.

        Cancel safety: cancelling only stops the park."""
        loop = asyncio.get_running_loop()
        park = park_ms / 1000 if park_ms >= 0 else PARK_MS / 1000
        bound = loop.time() + min(park, MAX_PARK)
        while not (w.woken or w.turn):
            until = bound
            if w.standby_until is not None:
                until = min(until, w.standby_until)
            if deadline is not None:
                until = min(until, deadline)
            left = until - loop.time()
            if left <= 0:
                return
            # Not wait_for: before Python 3.12 a wait_for timing out as the
            # caller's cancel lands swallows the cancel.
            timer = loop.call_later(left, w.event.set)
            try:
                await w.event.wait()
            finally:
                timer.cancel()
            w.event.clear()

    def _orphan(self, ch: Channel, wid: int, token: Optional[str]) -> None:
        """Duty 9: a wake-up for a waiter this client no longer has is passed
        on; so is a fair grant (``token``: the acquisition it names) unless
        this client holds that acquisition (the waiter's attempt found the
        grant before the message came: passing it on would release a lock in
        use). A grant to a waiter that left without the lock, or was served
        and let go, comes from a queue that still holds its member: one the
        pass of its leaving has not reached yet, or a promoted replica's,
        which lacks the old primary's last changes."""
        if self._closed:
            return
        if token is None and ch.kind in ("mutex", "election", "semaphore"):
            member = f"{self.id}:{wid}"
        elif token is not None and ch.kind == "fair" \
                and not any(g.token == token for g in self._holds):
            member = f"{self.id}:{wid}:{token}"
        else:
            return
        k = _Keys(self.prefix, ch.base[len(self.prefix) + 2:-1])
        self._spawn(self._retried(lambda: self._pass(ch.kind, k, member, ch.permits)))

    # -- acquiring -----------------------------------------------------------

    def _start(self, kind: str, k: _Keys, token: str, lease_ms: int, member: str,
               arrival: str, permits: Optional[int]) -> _Call:
        """Send one attempt now: a cancelled caller leaves its reply to be
        read, so ``_undo`` learns the outcome (``_Call.outcome``)."""
        return self._attempt(kind, k, token, lease_ms, member, arrival, permits)

    async def _undo(self, attempt: _Call, kind: str, k: _Keys, token: str,
                    permits: Optional[int], member: Optional[str]) -> None:
        """Duties 9 and 10 for a caller that left with an attempt in flight
        (cancelled) or of unknown outcome (connection lost): once the attempt
        has answered, give back what it took, then pass the member on. In
        that order: a pass sent first could be overtaken by the attempt,
        which would queue the member again."""
        try:
            taken = (await attempt.outcome()).acquired
        except (KindConflict, PermitsMismatch, ProtocolMismatch, WrongType, NoPermission):
            taken = False  # refused: nothing was written
        except Exception:
            # Unknown, unless no send of it was ever written (every connect
            # refused, e.g. by a dead primary mid-failover): then it never
            # reached a server, and a release would only run later, on
            # whichever server answers then. A release of a lock never
            # taken answers 0 / -1.
            taken = attempt.written
        except BaseException:
            taken = True
        if taken:
            await self._retried(lambda: self._release(kind, k, token, permits))
        if member is not None:
            await self._retried(lambda: self._pass(kind, k, member, permits))

    async def _acquire(self, kind: str, k: _Keys, lease_ms: int, timeout: Optional[float],
                       wait: bool, permits: Optional[int]) -> Optional[Guard]:
        loop = asyncio.get_running_loop()
        deadline = None
        if timeout is not None:
            if not timeout >= 0:
                raise InvalidLease(f"timeout {timeout!r} s is negative")
            deadline = loop.time() + timeout
        token = _KINDS[kind][0] + uuid.uuid4().hex
        member: Optional[str] = None  # set once passed in an attempt: pass it on leaving
        inflight: Optional[_Call] = None  # the attempt on the wire, if any
        channel = (k.wake + self.id).encode()
        arrival = ""
        first = wait and self._hub.subscribed(channel)  # no attempt yet: the loop's first is due
        if not first:
            # Fast path (duty 2): one call, no member, no SUBSCRIBE. Skipped
            # while the channel is still subscribed (a lock this client
            # waited for within the linger): the first attempt of the loop
            # then queues at once, saving a round trip per contended lock.
            sent = loop.time()
            inflight = self._start(kind, k, token, lease_ms, "", "", permits)
            try:
                r = await inflight
            except BaseException:
                self._spawn(self._undo(inflight, kind, k, token, permits, None))
                raise
            if r.acquired:
                return self._hold(kind, k, token, r.value, lease_ms, sent, permits)
            if not wait:
                return None
            if r.now_us is not None:
                arrival = str(r.now_us)  # duty 6: keep FIFO position
        ch, w = self._hub.join(channel, k.b, kind, token, permits)
        inflight = None
        try:
            while True:
                if first:
                    first = False
                elif deadline is not None and loop.time() >= deadline:
                    raise Timeout(f"lock {k.name!r} not acquired within {timeout} s")
                if ch.confirmed is None or not ch.confirmed.done():
                    await self._wait_until(self._hub.subscribe(ch), deadline, k)  # duty 3
                # Duty 4: armed before the attempt, so a message that lands
                # while the reply is on the wire ends the park below at once.
                w.event.clear()
                w.woken = w.turn = False
                w.standby_until = None
                sent = loop.time()
                if ch.take_place(w):  # duty 6: only the client's queuer queues
                    member = f"{self.id}:{w.id}" + (f":{token}" if kind == "fair" else "")
                    inflight = self._start(kind, k, token, lease_ms, member, arrival, permits)
                else:
                    inflight = self._start(kind, k, token, lease_ms, "", "", permits)
                r = await inflight
                inflight = None
                if r.acquired:
                    member = None  # the acquire took it out of the queue
                    return self._hold(kind, k, token, r.value, lease_ms, sent, permits)
                if not arrival and r.now_us is not None:
                    arrival = str(r.now_us)  # duty 6: the first failed reply's
                await self._park(w, r.value, deadline)
        except BaseException:
            if inflight is not None or member is not None:  # duties 9 and 10
                done: _Call = inflight or _answered(None)
                self._spawn(self._undo(done, kind, k, token, permits, member))
            raise
        finally:
            self._hub.leave(ch, w)

    async def _wait_until(self, coro, deadline: Optional[float], k: _Keys) -> None:
        if deadline is None:
            await coro
            return
        left = deadline - asyncio.get_running_loop().time()
        task = asyncio.ensure_future(coro)
        try:
            # asyncio.wait, not wait_for, which can swallow a cancel (above).
            await asyncio.wait({task}, timeout=max(left, 0))
        finally:
            if not task.done():
                task.cancel()
        if task.cancelled() or not task.done():
            raise Timeout(f"lock {k.name!r}: not subscribed before the timeout")
        task.result()

    # -- holding ---------------------------------------------------------

    def _hold(self, kind: str, k: _Keys, token: str, fence: int, lease_ms: int,
              sent: float, permits: Optional[int]) -> Guard:
        g = Guard(self, kind, k, token, fence, lease_ms, sent, permits)
        self._holds.add(g)
        if self._renewal is None:
            self._renewal = asyncio.ensure_future(self._renew_loop())
        elif g._next_renew < self._renew_at:  # else the loop wakes in time anyway
            # Move the loop's alarm in rather than wake it: an uncontended
            # lock + unlock then costs the renewal loop nothing.
            self._renew_at = g._next_renew
            if self._renew_timer is not None:
                self._renew_timer.cancel()
            self._renew_timer = asyncio.get_running_loop().call_at(
                g._next_renew, self._renew_now.set)
        return g

    async def _renew_loop(self) -> None:
        """One task renews every guard (PROTOCOL.md, "Holding")."""
        loop = asyncio.get_running_loop()
        while not self._closed:
            now = loop.time()
            for g in list(self._holds):
                if now >= g._deadline:  # the local deadline passed unconfirmed
                    self._lose(g)
            due = [g for g in self._holds if g._next_renew <= now]
            for batch_kind in ("plain", "semaphore", "read"):
                batch = [g for g in due if _RENEW_BY.get(g._kind, "plain") == batch_kind]
                by_lease: Dict[int, List[Guard]] = {}
                for g in batch:
                    by_lease.setdefault(g._lease_ms, []).append(g)
                for lease_ms, gs in by_lease.items():
                    for i in range(0, len(gs), RENEW_BATCH):
                        self._spawn(self._renew(gs[i:i + RENEW_BATCH], lease_ms))
                for g in batch:
                    g._next_renew = math.inf  # until the call answers
            nxt = min([g._next_renew for g in self._holds] + [g._deadline for g in self._holds]
                      + [now + 3600])
            self._renew_now.clear()
            self._renew_at = nxt
            self._renew_timer = loop.call_at(max(nxt, loop.time() + 0.001), self._renew_now.set)
            try:
                await self._renew_now.wait()
            finally:
                self._renew_timer.cancel()
                self._renew_timer = None
            self._renew_at = -math.inf  # scanning: every new hold wakes the loop

    def _lose(self, g: Guard) -> None:
        g.lost.set()
        self._holds.discard(g)

    async def _renew(self, gs: List[Guard], lease_ms: int) -> None:
        loop = asyncio.get_running_loop()
        sent = loop.time()
        try:
            # Each lock's keys, its token and the channel its waiters
            # listen on: a shortened lease tells them (PROTOCOL.md,
            # "extend"). The RwLock's waiters listen on B:rw.
            kind = gs[0]._kind
            rw = kind in ("read", "write")
            args = [x for g in gs
                    for x in (g.token, g._keys.rw if rw else g._keys.wake)]
            if kind == "semaphore":
                keys = [x for g in gs
                        for x in (g._keys.holders, g._keys.permits, g._keys.queue)]
                codes = await self._call("sem_extend", keys, [lease_ms, *args])
            elif kind == "read":
                codes = await self._call("rw_read_extend", [g._keys.readers for g in gs],
                                         [lease_ms, *args])
            else:
                queue = {"fair": "fifo", "write": "writers"}.get(kind, "waiters")
                keys = [x for g in gs for x in (g._keys.b, getattr(g._keys, queue))]
                codes = await self._call("extend", keys, [lease_ms, *args])
        except Exception:
            for g in gs:
                g._next_renew = loop.time() + min(g._renew_every / 4, 0.25)
            self._renew_now.set()
            return
        for g, code in zip(gs, codes):
            if g not in self._holds:
                continue  # unlocked or lost meanwhile: never revived
            if int(code) != 1 or loop.time() >= g._deadline:
                self._lose(g)
            else:
                g._deadline = sent + g._margin(lease_ms)
                g._next_renew = sent + g._renew_every
        self._renew_now.set()

    # -- handles and closing ---------------------------------------------

    def mutex(self, name: str, lease: float = DEFAULT_LEASE) -> Mutex:
        """A :class:`Mutex` handle (nothing is sent). ``lease`` in seconds,
        renewed every third of it while held. Raises InvalidName, InvalidLease."""
        return Mutex(self, name, lease)

    def fair_mutex(self, name: str, lease: float = DEFAULT_LEASE) -> FairMutex:
        """A :class:`FairMutex` handle. Raises InvalidName, InvalidLease."""
        return FairMutex(self, name, lease)

    def semaphore(self, name: str, permits: int, lease: float = DEFAULT_LEASE) -> Semaphore:
        """A :class:`Semaphore` handle of ``permits`` permits.
        Raises InvalidName, InvalidLease, InvalidPermits."""
        if not isinstance(permits, int) or permits < 1:
            raise InvalidPermits(f"permits {permits!r}: at least 1")
        return Semaphore(self, name, lease, permits)

    def rwlock(self, name: str, lease: float = DEFAULT_LEASE) -> "RwLock":
        """A :class:`RwLock` handle (nothing is sent). Raises InvalidName, InvalidLease."""
        from ._rwlock import RwLock
        return RwLock(self, name, lease)

    def election(self, name: str, lease: float = DEFAULT_LEASE) -> "Election":
        """An :class:`Election` handle (nothing is sent); ``lease``: the
        leader's, renewed while it leads. Raises InvalidName, InvalidLease."""
        from ._election import Election
        return Election(self, name, lease)

    async def aclose(self) -> None:
        """Release every held lock, finish background releases and pass-ons,
        and close the connections (Rust ``shutdown``).

        Waits for that work at most twice the response timeout (4 s), as
        Rust's ``shutdown`` does: long enough for an attempt that times out
        and a retry. Work still failing then (Redis not answering) is
        dropped; the leases, and the queue entries' expiry, end it.

        Raises: nothing; failures to release leave the leases to expire.

        Cancel safety: cancelling may leave held locks to their leases.
        """
        for g in list(self._holds):
            g._done = True
            self._spawn(self._retried(
                lambda g=g: self._release(g._kind, g._keys, g.token, g._permits)))
        self._holds.clear()
        if self._renewal is not None:
            self._renewal.cancel()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 2 * RESPONSE_TIMEOUT
        while self._background:
            left = deadline - loop.time()
            if left <= 0:
                for t in list(self._background):
                    t.cancel()
                await asyncio.gather(*list(self._background), return_exceptions=True)
                break
            await asyncio.wait(list(self._background), timeout=left)
        self._closed = True
        await self._hub.aclose()
        if self._mux is not None:
            await self._mux.aclose()
        await self._redis.aclose()
        for close in self._on_close:
            await self._quiet(close())


async def connect(url: str, prefix: str = "redbell") -> Client:
    """Connect to the Redis at ``url`` (``redis://``, ``rediss://``, ``unix://``).

    Raises:
        RedisError: the server did not answer a PING.

    Cancel safety: cancelling leaves no connection open.
    """
    client = Client(url, prefix)
    try:
        await client._redis.ping()
    except BaseException as e:
        await client._redis.aclose()
        if isinstance(e, rexc.RedisError):
            raise _map_error(e) from e
        raise
    return client
