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
import math
import time
import unicodedata
import uuid
from typing import Any, Dict, List, Optional, Set

import redis.asyncio as aioredis
from redis import exceptions as rexc

from . import _scripts
from ._hub import Channel, Hub
from .errors import (
    ClientClosed, InvalidLease, InvalidName, InvalidPermits, KindConflict,
    NoPermission, NotHeld, PermitsMismatch, ProtocolMismatch, RedisError,
    Timeout, WrongType,
)

# The protocol's client-side numbers (PROTOCOL.md, "The Rust client's numbers").
DEFAULT_LEASE = 30.0
FENCE_TTL_MS = 604_800_000
QUEUE_GRACE_MS = 2_000
PARK_MS = 1_000
MAX_PARK = 24 * 3600.0
HANDOFF_MS = 100
CLAIM_MS = 500
SEM_RESERVE_MS = 250
MAX_LEASE_MS = 31_536_000_000
RESPONSE_TIMEOUT = 2.0
RENEW_BATCH = 512
POOL_SIZE = 32


def _lease_ms(seconds: float) -> int:
    """A lease in whole ms, rounded up (duty 1); 1 ms to one year."""
    try:
        ms = math.ceil(float(seconds) * 1000)
    except (TypeError, ValueError, OverflowError):
        raise InvalidLease(f"lease {seconds!r} is not a number of seconds") from None
    if not 1 <= ms <= MAX_LEASE_MS:
        raise InvalidLease(f"lease {seconds!r} s is outside 1 ms .. 365 days")
    return ms


def _check_name(name: str) -> None:
    if not isinstance(name, str):
        raise InvalidName(f"lock name {name!r} is not a str")
    n = len(name.encode("utf-8", "surrogatepass"))
    if not 1 <= n <= 512:
        raise InvalidName(f"lock name is {n} bytes; 1 to 512 allowed")
    for c in name:
        if c in "{}" or unicodedata.category(c) in ("Cc", "Cs"):
            raise InvalidName(f"lock name {name!r} contains {c!r}")


def _map_error(e: Exception) -> Exception:
    """A redis-py exception as the redbell exception it means."""
    msg = str(e)
    if msg.startswith("REDBELL_PROTOCOL"):
        return ProtocolMismatch(
            f"{msg}: every client of one namespace must speak protocol "
            f"version {_scripts.PROTOCOL_VERSION}")
    if msg.startswith("WRONGKIND"):
        return KindConflict(msg)
    if msg.startswith("PERMITS"):
        try:
            stored: Optional[int] = int(msg.split()[1])
        except (IndexError, ValueError):
            stored = None
        return PermitsMismatch(msg, stored)
    if msg.startswith("WRONGTYPE"):
        return WrongType(msg)
    if isinstance(e, rexc.NoPermissionError) or msg.startswith("NOPERM"):
        return NoPermission(msg)
    return RedisError(msg or type(e).__name__)


class _Keys:
    """The keys and channels of one lock (PROTOCOL.md, "Keys")."""

    def __init__(self, prefix: str, name: str) -> None:
        self.name = name
        self.b = f"{prefix}:{{{name}}}"

    def __getattr__(self, sub: str) -> str:
        return f"{self.b}:{sub.replace('_', ':')}"


# Per kind: token letter, acquire/release/pass scripts.
_KINDS = {
    "mutex": ("m", "acquire", "release", "pass"),
    "fair": ("q", "fair_acquire", "fair_release", "fair_pass"),
    "semaphore": ("s", "sem_acquire", "sem_release", "sem_pass"),
}


class Guard:
    """A held lock (or semaphore permit): its fence, token and lost signal.

    Renewed in the background every third of its lease while it lives;
    ``lost`` is set when a renewal finds it gone or the local deadline
    passes unconfirmed (PROTOCOL.md, "Holding"). Use it as an async
    context manager, or call :meth:`unlock`.
    """

    def __init__(self, client: "Client", kind: str, keys: _Keys, token: str,
                 fence: int, lease_ms: int, sent: float, permits: Optional[int]) -> None:
        self._client = client
        self._kind = kind
        self._keys = keys
        self._permits = permits
        self.name = keys.name
        """The lock's name."""
        self.token = token
        """This acquisition's owner token (kind letter + 32 hex digits)."""
        self.fence = fence
        """The fencing token: strictly increasing per lock name across every
        client of every language."""
        self.lost = asyncio.Event()
        """Set once the hold is lost (lease expired, broken, or unrenewable)."""
        self._lease_ms = lease_ms
        self._renew_every = lease_ms / 3000
        self._deadline = sent + self._margin(lease_ms)
        """Loop time the hold ends unless renewed: s + L - (L/100 + 2 ms)."""
        self._next_renew = sent + self._renew_every
        self._done = False

    @staticmethod
    def _margin(lease_ms: int) -> float:
        return (lease_ms - (lease_ms / 100 + 2)) / 1000

    @property
    def is_lost(self) -> bool:
        """Whether the hold is known lost (a lost hold is never renewed again)."""
        return self.lost.is_set()

    async def unlock(self) -> None:
        """Release the lock.

        Raises:
            NotHeld: it was no longer held (expired, or taken by another token).
            RedisError: the release could not be sent; the lease then ends it.

        Cancel safety: renewal stops at once and the release runs to its end
        in the background.
        """
        if self._done:
            raise NotHeld(f"lock {self.name!r} was already released")
        self._done = True
        self._client._holds.discard(self)
        # Shielded: a cancelled unlock still releases (redis-py #3847).
        code = await asyncio.shield(asyncio.ensure_future(
            self._client._release(self._kind, self._keys, self.token, self._permits)))
        if code != 1:
            self.lost.set()
            raise NotHeld(f"lock {self.name!r} was no longer held")

    async def __aenter__(self) -> "Guard":
        return self

    async def __aexit__(self, exc_type, exc, tb) -> None:
        try:
            await self.unlock()
        except NotHeld:
            if exc_type is None:
                raise


class _Handle:
    """What Mutex, FairMutex and Semaphore share: lock / try_lock / async with."""

    _kind = "mutex"

    def __init__(self, client: "Client", name: str, lease: float,
                 permits: Optional[int] = None) -> None:
        _check_name(name)
        self._client = client
        self._keys = _Keys(client.prefix, name)
        self._lease_ms = _lease_ms(lease)
        self._permits = permits
        self._entered: Dict[Any, List[Guard]] = {}
        self.name = name
        """The lock's name."""

    async def lock(self, timeout: Optional[float] = None) -> Guard:
        """Wait for the lock, woken by the releasing client's message.

        ``timeout``: seconds to wait at most (None: as long as it takes).

        Raises:
            Timeout: not acquired within ``timeout``.
            KindConflict: the name is in use as another kind of lock.
            ProtocolMismatch: the server's scripts speak another version.
            RedisError, NoPermission, WrongType: from the server.

        Cancel safety: cancelling leaves nothing behind: an attempt in flight
        has its token released and its queue place passed on in the background.
        """
        return await self._client._acquire(self._kind, self._keys, self._lease_ms,
                                           timeout, True, self._permits)

    async def try_lock(self) -> Optional[Guard]:
        """One attempt: the guard, or None if the lock is held.

        Raises: as :meth:`lock`, except Timeout.

        Cancel safety: as :meth:`lock`.
        """
        return await self._client._acquire(self._kind, self._keys, self._lease_ms,
                                           None, False, self._permits)

    async def __aenter__(self) -> Guard:
        g = await self.lock()
        self._entered.setdefault(asyncio.current_task(), []).append(g)
        return g

    async def __aexit__(self, exc_type, exc, tb) -> None:
        task = asyncio.current_task()
        stack = self._entered[task]
        g = stack.pop()
        if not stack:
            del self._entered[task]
        await g.__aexit__(exc_type, exc, tb)


class Mutex(_Handle):
    """A distributed mutex (token letter ``m``). A newcomer may barge in
    ahead of a woken waiter; :class:`FairMutex` serves waiters in order."""

    _kind = "mutex"


class FairMutex(_Handle):
    """A FIFO mutex (token letter ``q``): a release grants the lock to the
    oldest live waiter, whatever client or language it runs in; the grantee
    holds it only once its confirming attempt answers (PROTOCOL.md duty 8)."""

    _kind = "fair"


class Semaphore(_Handle):
    """A counting semaphore of ``permits`` permits, FIFO among waiters.
    Every client must use the same count (else :class:`PermitsMismatch`).
    :meth:`lock` takes one permit; ``acquire`` / ``try_acquire`` are aliases."""

    _kind = "semaphore"

    @property
    def permits(self) -> int:
        """The permit count."""
        assert self._permits is not None
        return self._permits

    async def acquire(self, timeout: Optional[float] = None) -> Guard:
        """Alias of :meth:`lock`. Raises and cancel safety: as :meth:`lock`."""
        return await self.lock(timeout)

    async def try_acquire(self) -> Optional[Guard]:
        """Alias of :meth:`try_lock`. Raises and cancel safety: as :meth:`try_lock`."""
        return await self.try_lock()


class _Reply:
    __slots__ = ("acquired", "value", "now_us")

    def __init__(self, reply: Any) -> None:
        self.acquired = int(reply[0]) == 1
        self.value = int(reply[1])
        """The fence if acquired, else the park (or pttl) in ms."""
        self.now_us = int(reply[2]) if len(reply) > 2 else None


def _answered(value: Any) -> "asyncio.Future[Any]":
    """A future already answered {0, 0}: an attempt that took nothing."""
    fut = asyncio.get_running_loop().create_future()
    fut.set_result(_Reply([0, 0]))
    return fut


class Client:
    """A redbell client: one Redis connection pool, one pub/sub connection
    (opened by the first waiter), one renewal task. Create it with
    :func:`connect`; close it with :meth:`aclose`."""

    def __init__(self, url: str, prefix: str = "redbell") -> None:
        if not prefix or ":" in prefix or "{" in prefix or "}" in prefix:
            raise InvalidName(f"prefix {prefix!r}: non-empty, without ':', '{{' or '}}'")
        self.prefix = prefix
        self.id = uuid.uuid4().hex
        """The client id ``C``: 32 lowercase hex digits, random per instance."""
        # redis-py does not multiplex: each call in flight takes a pooled
        # connection, so the pool is bounded and a call beyond it waits.
        self._redis = aioredis.Redis(connection_pool=aioredis.BlockingConnectionPool.from_url(
            url, protocol=2, socket_timeout=RESPONSE_TIMEOUT,
            socket_connect_timeout=RESPONSE_TIMEOUT, max_connections=POOL_SIZE,
            timeout=None))
        self._hub = Hub(url, self._orphan, socket_connect_timeout=RESPONSE_TIMEOUT)
        self._scripts = {s.name: s for s in _scripts.all_scripts()}
        self._holds: Set[Guard] = set()
        self._background: Set[asyncio.Task] = set()
        self._renewal: Optional[asyncio.Task] = None
        self._renew_now = asyncio.Event()
        self._renew_at = -math.inf
        """Loop time the renewal loop sleeps until (-inf while it runs)."""
        self._closed = False

    # -- scripts -----------------------------------------------------------

    async def _call(self, name: str, keys: List[str], args: List[Any]) -> Any:
        """EVALSHA, then EVAL after NOSCRIPT; ARGV[1] is the version."""
        if self._closed:
            raise ClientClosed("client closed")
        s = self._scripts[name]
        argv = [_scripts.PROTOCOL_VERSION, *args]
        try:
            try:
                return await self._redis.evalsha(s.sha1, len(keys), *keys, *argv)
            except rexc.NoScriptError:
                return await self._redis.eval(s.source, len(keys), *keys, *argv)
        except rexc.RedisError as e:
            raise _map_error(e) from e

    def _spawn(self, coro) -> None:
        t = asyncio.ensure_future(coro)
        self._background.add(t)
        t.add_done_callback(self._background.discard)

    async def _quiet(self, coro) -> None:
        try:
            await coro
        except Exception:
            pass  # the lease or the queue entry's expiry ends it

    async def _attempt(self, kind: str, k: _Keys, token: str, lease_ms: int,
                       member: str, arrival: str, permits: Optional[int]) -> _Reply:
        if kind == "mutex":
            r = await self._call("acquire", [k.b, k.fence, k.waiters, k.readers, k.holders],
                                 [token, lease_ms, FENCE_TTL_MS, member, QUEUE_GRACE_MS,
                                  PARK_MS, HANDOFF_MS, "m"])
        elif kind == "fair":
            r = await self._call("fair_acquire",
                                 [k.b, k.fence, k.fifo, k.handoff, k.readers, k.holders],
                                 [token, lease_ms, FENCE_TTL_MS, member, QUEUE_GRACE_MS,
                                  PARK_MS, k.b + ":wake:", CLAIM_MS, arrival])
        else:
            r = await self._call("sem_acquire",
                                 [k.holders, k.fence, k.queue, k.queue_expiry, k.permits,
                                  k.b, k.readers],
                                 [token, lease_ms, FENCE_TTL_MS, member, QUEUE_GRACE_MS,
                                  PARK_MS, k.b + ":wake:", permits, SEM_RESERVE_MS, arrival])
        return _Reply(r)

    async def _release(self, kind: str, k: _Keys, token: str, permits: Optional[int]) -> int:
        if kind == "mutex":
            r = await self._call("release", [k.b, k.waiters], [token, k.b + ":wake:", HANDOFF_MS])
        elif kind == "fair":
            r = await self._call("fair_release", [k.b, k.fence, k.fifo, k.handoff],
                                 [token, k.b + ":wake:", CLAIM_MS, FENCE_TTL_MS])
        else:
            r = await self._call("sem_release", [k.holders, k.queue, k.queue_expiry, k.permits],
                                 [token, k.b + ":wake:", permits, SEM_RESERVE_MS])
        return int(r)

    async def _pass(self, kind: str, k: _Keys, member: str, permits: Optional[int]) -> None:
        if kind == "mutex":
            await self._call("pass", [k.b, k.waiters], [member, k.b + ":wake:", HANDOFF_MS])
        elif kind == "fair":
            await self._call("fair_pass", [k.b, k.fence, k.fifo, k.handoff],
                             [member, k.b + ":wake:", CLAIM_MS, FENCE_TTL_MS])
        else:
            await self._call("sem_pass", [k.holders, k.queue, k.queue_expiry, k.permits],
                             [member, k.b + ":wake:", permits, SEM_RESERVE_MS])

    def _orphan(self, ch: Channel, wid: int) -> None:
        """Duty 9: a wake-up for a waiter this client no longer has is passed on."""
        if ch.kind in ("mutex", "semaphore") and not self._closed:
            k = _Keys(self.prefix, ch.base[len(self.prefix) + 2:-1])
            self._spawn(self._quiet(self._pass(ch.kind, k, f"{self.id}:{wid}", ch.permits)))

    # -- acquiring -----------------------------------------------------------

    def _start(self, kind: str, k: _Keys, token: str, lease_ms: int, member: str,
               arrival: str, permits: Optional[int]) -> "asyncio.Future[_Reply]":
        """Send one attempt as a task of its own, awaited through ``shield``:
        a cancelled caller leaves it running, so redis-py never sees the
        cancel (it would drop the connection mid-reply) and ``_undo`` learns
        the outcome."""
        return asyncio.ensure_future(
            self._attempt(kind, k, token, lease_ms, member, arrival, permits))

    async def _undo(self, attempt: "asyncio.Future[_Reply]", kind: str, k: _Keys, token: str,
                    permits: Optional[int], member: Optional[str]) -> None:
        """Duties 9 and 10 for a caller that left with an attempt in flight
        (cancelled) or of unknown outcome (connection lost): once the attempt
        has answered, give back what it took, then pass the member on. In
        that order: a pass sent first could be overtaken by the attempt,
        which would queue the member again."""
        try:
            taken = (await attempt).acquired
        except (KindConflict, PermitsMismatch, ProtocolMismatch, WrongType, NoPermission):
            taken = False  # refused: nothing was written
        except BaseException:
            taken = True  # unknown: a release of a lock never taken answers 0 / -1
        if taken:
            await self._quiet(self._release(kind, k, token, permits))
        if member is not None:
            await self._quiet(self._pass(kind, k, member, permits))

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
        inflight: Optional[asyncio.Future] = None  # the attempt on the wire, if any
        sent = loop.time()
        inflight = self._start(kind, k, token, lease_ms, "", "", permits)  # fast path (duty 2)
        try:
            r = await asyncio.shield(inflight)
        except BaseException:
            self._spawn(self._undo(inflight, kind, k, token, permits, None))
            raise
        if r.acquired:
            return self._hold(kind, k, token, r.value, lease_ms, sent, permits)
        if not wait:
            return None
        arrival = str(r.now_us) if r.now_us is not None else ""  # duty 6: keep FIFO position
        ch, w = self._hub.join((k.b + ":wake:" + self.id).encode(), k.b, kind, token, permits)
        inflight = None
        try:
            while True:
                if deadline is not None and loop.time() >= deadline:
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
                r = await asyncio.shield(inflight)
                inflight = None
                if r.acquired:
                    member = None  # the acquire took it out of the queue
                    return self._hold(kind, k, token, r.value, lease_ms, sent, permits)
                park = r.value / 1000 if r.value >= 0 else PARK_MS / 1000
                bound = loop.time() + min(park, MAX_PARK)  # duty 7: bounded park
                while not (w.woken or w.turn):
                    until = bound
                    if w.standby_until is not None:
                        until = min(until, w.standby_until)
                    if deadline is not None:
                        until = min(until, deadline)
                    left = until - loop.time()
                    if left <= 0:
                        break
                    # Not wait_for: before Python 3.12 a wait_for timing out
                    # as the caller's cancel lands swallows the cancel.
                    timer = loop.call_later(left, w.event.set)
                    try:
                        await w.event.wait()
                    finally:
                        timer.cancel()
                    w.event.clear()
        except BaseException:
            if inflight is not None or member is not None:  # duties 9 and 10
                done: asyncio.Future = inflight or _answered(None)
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
        if g._next_renew < self._renew_at:  # else the loop wakes in time anyway
            self._renew_now.set()
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
            for batch_kind in ("plain", "semaphore"):
                batch = [g for g in due if (g._kind == "semaphore") == (batch_kind == "semaphore")]
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
            timer = loop.call_later(max(nxt - loop.time(), 0.001), self._renew_now.set)
            try:
                await self._renew_now.wait()
            finally:
                timer.cancel()
            self._renew_at = -math.inf  # scanning: every new hold wakes the loop

    def _lose(self, g: Guard) -> None:
        g.lost.set()
        self._holds.discard(g)

    async def _renew(self, gs: List[Guard], lease_ms: int) -> None:
        loop = asyncio.get_running_loop()
        sent = loop.time()
        try:
            # Each lock's keys, its token and its wake prefix (a shortened
            # lease tells the waiters; PROTOCOL.md, "extend").
            args = [x for g in gs for x in (g.token, g._keys.b + ":wake:")]
            if gs[0]._kind == "semaphore":
                keys = [x for g in gs
                        for x in (g._keys.holders, g._keys.permits, g._keys.queue)]
                codes = await self._call("sem_extend", keys, [lease_ms, *args])
            else:
                keys = [x for g in gs for x in
                        (g._keys.b, g._keys.waiters if g._kind == "mutex" else g._keys.fifo)]
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

    async def aclose(self) -> None:
        """Release every held lock, finish background releases and pass-ons,
        and close the connections (Rust ``shutdown``).

        Raises: nothing; failures to release leave the leases to expire.

        Cancel safety: cancelling may leave held locks to their leases.
        """
        for g in list(self._holds):
            g._done = True
            self._spawn(self._quiet(self._release(g._kind, g._keys, g.token, g._permits)))
        self._holds.clear()
        if self._renewal is not None:
            self._renewal.cancel()
        while self._background:
            await asyncio.gather(*list(self._background), return_exceptions=True)
        self._closed = True
        await self._hub.aclose()
        await self._redis.aclose()


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
