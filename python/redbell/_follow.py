"""Where the primary is, as the sentinels name it, and following it across
failovers (the Rust ``src/conn/sentinel.rs`` and ``switches.rs``).

Errors are not enough: after a failover the old primary still answers as a
primary until the sentinels convert it to a replica, 8 s or more later, and
a client that stays on it grants locks the new primary never hears of. So
the :class:`Follower`:

- **listens** to every sentinel's ``+switch-master``, subscribed before the
  primary is first asked for (an announcement nobody hears is missed), and
  on one for its master re-resolves until it is on the announced primary;
  a lost subscription is made again with a jittered backoff (0.1 to 5 s)
  and followed by one re-resolution;
- **resolves** by asking all sentinels at once and trying their answers
  newest configuration epoch first (sentinels tell each other of a failover
  only every 2 s); a named node must answer ``ROLE`` as ``master`` (when
  ``ROLE`` and ``HELLO`` are both denied, the sentinel is trusted); it never
  moves back to an older epoch than the one it is on. It acts as soon as
  the answers in hand decide it, not when the slowest sentinel has
  answered (a frozen one would keep it on the old primary for a timeout
  every look): an answer with a newer epoch whose node answers ``ROLE`` as
  ``master`` moves it at once; otherwise every answer decides but those
  of sentinels that timed out at their last look (a silent sentinel costs
  one timeout once; the asks a look does not wait for still run to their
  end, so one that answers again is waited for again); a majority does
  not (right after a failover only its leader may know the new epoch).
  The epoch followed is the newest the primary it is on is named at (a
  client that missed a failover and the one back must not take a stale
  answer of the epoch in between for news);
- **is told** of every command error that may mean the primary moved
  (refused, reset, timed out, ``READONLY``: :meth:`Follower.report`), and
  re-resolves, one at a time;
- **moves** the client: every connection opened from then on goes to the
  new address (:class:`PrimaryConnection`), and the ``on_move`` callbacks
  drop the connections to the old one (the caller's mux and hub).
"""

import asyncio
import random
from typing import Any, Callable, Dict, List, Optional, Tuple

import redis.asyncio as aioredis
from redis import exceptions as rexc
from redis.asyncio.connection import Connection

from .errors import RedisError

Address = Tuple[str, int]

FAILOVER_WAIT = 5.0
"""Seconds a first resolution asks again while the named nodes are not the
primary (a failover in progress)."""
FOLLOW_TRIES = 20
"""Re-resolutions after an announcement, 0.1 s apart, until on its primary."""


class _Silent(RedisError):
    """A sentinel did not answer in time (frozen, or unreachable)."""


def _text(v: Any) -> str:
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)


def _field(reply: Any, name: str) -> Optional[str]:
    """``name``'s value in a map reply or a flat name/value array."""
    if isinstance(reply, dict):
        for k, v in reply.items():
            if _text(k) == name:
                return _text(v)
        return None
    if isinstance(reply, (list, tuple)):
        for i in range(0, len(reply) - 1, 2):
            if _text(reply[i]) == name:
                return _text(reply[i + 1])
    return None


class Follower:
    """The primary of ``master`` as the sentinels name it, followed."""

    def __init__(self, sentinels: List[Tuple[str, int, dict]], master: str,
                 primary: Dict[str, Any], timeout: float) -> None:
        # sentinels: host, port and connection options of each sentinel;
        # primary: the primary's connection options (credentials, db).
        self.master = master
        self.timeout = timeout
        """Seconds a connect or a reply may take."""
        self._primary = primary
        self._sentinels = [
            aioredis.Redis(host=h, port=p, protocol=2, socket_timeout=timeout,
                           socket_connect_timeout=timeout, **opts)
            for h, p, opts in sentinels]
        self._silent = [False] * len(self._sentinels)
        # Per sentinel: it timed out the last time it was asked (an ask a
        # look did not wait for still sets it, when it ends: _look).
        self._asks = [0] * len(self._sentinels)
        # Per sentinel: how many asks were started; only the latest one's
        # outcome sets its silent mark.
        self._unfinished: set = set()
        # Asks a look did not wait for, left to end (each bounded by the
        # timeout); cancelled by aclose.
        self.address: Optional[Address] = None
        """Where the primary is; None until the first resolution."""
        self.epoch = -1
        """The configuration epoch of the sentinels' answer it is on."""
        self.on_move: List[Callable[[], None]] = []
        """Called after each move, once the new address is in place."""
        self._lock = asyncio.Lock()
        self._reported: Optional[asyncio.Task] = None
        self._listeners: List[asyncio.Task] = []
        self._closed = False

    # -- resolution --------------------------------------------------------

    async def start(self) -> None:
        """Subscribe to every sentinel, then find the primary (asking again
        for up to :data:`FAILOVER_WAIT` while the nodes named are not it).

        Raises:
            RedisError: no sentinel answers, none knows the master, or no
                node they name answers as the primary.
        """
        firsts = await asyncio.gather(*(self._subscribe(s) for s in self._sentinels))
        self._listeners = [asyncio.ensure_future(self._listen(s, c))
                           for s, c in zip(self._sentinels, firsts)]
        deadline = asyncio.get_running_loop().time() + FAILOVER_WAIT
        pause = 0.1
        while True:
            error, not_primary = await self._resolve()
            if error is None:
                return
            if not not_primary or asyncio.get_running_loop().time() + pause >= deadline:
                raise error
            await asyncio.sleep(pause)
            pause = min(pause * 2, 1.0)

    async def resolve(self) -> bool:
        """Ask where the primary is and move there if it moved; whether it
        moved. Errors (no sentinel answers) leave it where it is."""
        before = self.address
        await self._resolve()
        return self.address != before

    def report(self) -> None:
        """A command failed in a way that may mean the primary moved:
        re-resolve in the background (one at a time)."""
        if self._closed or (self._reported is not None and not self._reported.done()):
            return
        self._reported = asyncio.ensure_future(self._resolve())

    async def current(self) -> Address:
        """The address to connect to: after a re-resolution under way."""
        if self._reported is not None and not self._reported.done():
            try:
                await asyncio.shield(self._reported)
            except Exception:
                pass
        if self.address is None:
            raise rexc.ConnectionError(f"no primary known for {self.master!r}")
        return self.address

    async def _resolve(self) -> Tuple[Optional[RedisError], bool]:
        """One resolution: (None, _) when on the primary (moved or not),
        else the error and whether a named node answered as not the primary."""
        async with self._lock:
            asked = {asyncio.ensure_future(self._look(i)): i
                     for i in range(len(self._sentinels))}
            pending = set(asked)
            answered = [False] * len(asked)
            named: List[Tuple[str, int, int]] = []
            errors: List[BaseException] = []
            tried: List[Address] = []
            last: Optional[Tuple[RedisError, bool]] = None
            # The epoch followed: the one the current primary was found at,
            # or a newer one it is named at in this look (a client that
            # missed a failover and the one back is on its old primary at
            # a newer epoch, and a stale answer of the epoch in between
            # names a demoted node, which answers as a primary until it is
            # converted).
            followed = self.epoch
            try:
                while pending:
                    done, pending = await asyncio.wait(pending,
                                                       return_when=asyncio.FIRST_COMPLETED)
                    for task in sorted(done, key=asked.__getitem__):
                        i = asked[task]
                        answered[i] = True
                        error = task.exception()
                        if error is not None:
                            errors.append(error)
                            continue
                        host, port, epoch = task.result()
                        addr = (host, port)
                        if addr == self.address:
                            followed = max(followed, epoch)
                        elif self.address is not None and epoch > followed \
                                and addr not in tried:
                            # A newer configuration than the one followed:
                            # its node answering as the primary decides it.
                            tried.append(addr)
                            refused = await self._refused(addr)
                            if refused is None:
                                self._move(addr, epoch)
                                return None, False
                            last = refused
                        named.append((host, port, epoch))
                    if self._decided(len(named), answered):
                        break
            finally:
                # Not waited for, but not cancelled: a sentinel back from a
                # partition must lose its silent mark when it answers, or
                # every later look is decided by whichever sentinel answers
                # first, however stale.
                for task in pending:
                    if self._closed:
                        task.cancel()
                    self._unfinished.add(task)
                    task.add_done_callback(self._settled)
            named.sort(key=lambda n: -n[2])  # stable: equal epochs in the order answered
            for host, port, epoch in named:
                addr = (host, port)
                if addr in tried:
                    continue
                tried.append(addr)
                refused = await self._refused(addr)
                if refused is not None:
                    if addr == self.address and not refused[1]:
                        # Unreachable: the sentinels' to fail over.
                        self.epoch = max(self.epoch, epoch)
                        return None, False
                    last = refused
                    continue
                if addr == self.address:
                    self.epoch = max(self.epoch, epoch)  # named at a newer one
                elif epoch >= self.epoch:
                    self._move(addr, epoch)
                return None, False  # older epoch: only stale sentinels answered
            if last is not None:
                return last
            if errors:
                return RedisError(f"no sentinel answers for {self.master!r}: {errors[0]}"), False
            return RedisError("no sentinel given"), False

    async def _look(self, i: int) -> Tuple[str, int, int]:
        """Sentinel ``i``'s answer (:meth:`_ask`), which sets its silent
        mark (unless a later ask of it was started meanwhile)."""
        self._asks[i] += 1
        ask = self._asks[i]
        try:
            named = await self._ask(self._sentinels[i])
        except Exception as e:
            if self._asks[i] == ask:
                self._silent[i] = isinstance(e, _Silent)
            raise
        if self._asks[i] == ask:
            self._silent[i] = False
        return named

    def _settled(self, task: "asyncio.Future[Any]") -> None:
        """An ask no look waited for has ended (its mark is set)."""
        self._unfinished.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved: not logged as never retrieved

    def _decided(self, named: int, answered: List[bool]) -> bool:
        """Whether ``named`` answers decide a look: at least one, while
        every sentinel not yet answered timed out at its last look. Not a
        majority: right after a failover only its leader may know the new
        epoch, and two stale answers that come first would keep the client
        on the old primary."""
        return named > 0 and all(a or s for a, s in zip(answered, self._silent))

    async def _refused(self, addr: Address) -> Optional[Tuple[RedisError, bool]]:
        """None when the node at ``addr`` answers ``ROLE`` as the primary
        (or cannot be asked: ACL), else why not and whether it answered as
        not the primary."""
        try:
            role = await self._role(addr)
        except Exception as e:
            return RedisError(f"{addr[0]}:{addr[1]}, named by a sentinel: {e}"), False
        if role not in ("master", None):
            return RedisError(f"{addr[0]}:{addr[1]}, named by a sentinel, is not the "
                              f"primary (ROLE {role})"), True
        return None

    def _move(self, addr: Address, epoch: int) -> None:
        first = self.address is None
        self.address, self.epoch = addr, epoch
        if not first:
            for callback in self.on_move:
                callback()

    async def _ask(self, sentinel: aioredis.Redis) -> Tuple[str, int, int]:
        """(host, port, config epoch) one sentinel names: ``SENTINEL
        MASTER``, else ``get-master-addr-by-name`` (epoch 0)."""
        async def asked() -> Tuple[str, int, int]:
            try:
                reply = await sentinel.execute_command("SENTINEL", "MASTER", self.master)
                ip, port = _field(reply, "ip"), _field(reply, "port")
                if ip is not None and port is not None:
                    return ip, int(port), int(_field(reply, "config-epoch") or 0)
            except rexc.ResponseError as e:
                if "No such master" in str(e):
                    raise RedisError(f"the sentinels do not know {self.master!r}") from None
            reply = await sentinel.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME",
                                                   self.master)
            if not reply:
                raise RedisError(f"the sentinels do not know {self.master!r}")
            return _text(reply[0]), int(reply[1]), 0
        async def asked_again() -> Tuple[str, int, int]:
            # A pooled connection may have died while the sentinel was
            # unreachable; redis-py before 6 does not retry on a fresh one.
            try:
                return await asked()
            except rexc.ConnectionError:
                return await asked()
        try:
            return await asyncio.wait_for(asked_again(), self.timeout)
        except (asyncio.TimeoutError, rexc.TimeoutError):
            raise _Silent("a sentinel did not answer in time") from None

    async def _role(self, addr: Address) -> Optional[str]:
        """What the node at ``addr`` says it is: ``ROLE``, else ``HELLO``'s
        ``role``; None when it cannot be asked (ACL)."""
        conn = Connection(host=addr[0], port=addr[1], socket_timeout=self.timeout,
                          socket_connect_timeout=self.timeout, **self._primary)

        async def asked() -> Optional[str]:
            await conn.connect()
            for cmd in ("ROLE", "HELLO"):
                await conn.send_command(cmd)
                try:
                    reply = await conn.read_response()
                except rexc.ResponseError:
                    continue  # denied, or unknown
                if cmd == "ROLE":
                    return _text(reply[0]) if isinstance(reply, list) and reply else None
                return _field(reply, "role")
            return None
        try:
            return await asyncio.wait_for(asked(), 2 * self.timeout)
        except asyncio.TimeoutError:
            raise rexc.TimeoutError("no answer to ROLE in time") from None
        finally:
            await conn.disconnect(nowait=True)

    # -- +switch-master ----------------------------------------------------

    async def _subscribe(self, sentinel: aioredis.Redis) -> Optional[Connection]:
        """A connection subscribed to ``+switch-master``; None when the
        sentinel cannot be reached in time."""
        conn = sentinel.connection_pool.make_connection()

        async def subscribed() -> None:
            await conn.connect()
            await conn.send_command("SUBSCRIBE", "+switch-master")
            await conn.read_response()  # the confirmation
        try:
            await asyncio.wait_for(subscribed(), max(self.timeout, 1.0))
        except (asyncio.TimeoutError, Exception):
            await conn.disconnect(nowait=True)
            return None
        conn.socket_timeout = None  # idle reads wait for the next announcement
        return conn

    async def _listen(self, sentinel: aioredis.Redis, conn: Optional[Connection]) -> None:
        """Follow one sentinel's announcements until :meth:`aclose`."""
        backoff = 0.1
        fresh = False
        while not self._closed:
            if conn is None:
                conn, fresh = await self._subscribe(sentinel), True
            if conn is not None:
                backoff = 0.1
                try:
                    if fresh:  # announcements made while nobody listened are missed
                        await self.resolve()
                    while True:
                        reply = await conn.read_response()
                        if isinstance(reply, list) and len(reply) >= 3 \
                                and reply[0] == b"message":
                            await self._announced(_text(reply[2]).split(" "))
                except Exception:
                    pass
                finally:
                    await conn.disconnect(nowait=True)
                    conn = None
            await asyncio.sleep(backoff * random.uniform(0.5, 1.5))
            backoff = min(backoff * 2, 5.0)

    async def _announced(self, payload: List[str]) -> None:
        """``<master> <old ip> <old port> <new ip> <new port>``: when about
        ours, re-resolve until on the announced primary (the sentinels not
        yet told name the old one; its epoch is older, so it is not taken)."""
        if len(payload) != 5 or payload[0] != self.master:
            return
        announced = (payload[3], int(payload[4]))
        for _ in range(FOLLOW_TRIES):
            if self.address == announced:
                return
            await self.resolve()
            if self.address == announced:
                return
            await asyncio.sleep(0.1)

    async def aclose(self) -> None:
        """Stop listening and close the connections to the sentinels."""
        self._closed = True
        tasks = list(self._listeners) + list(self._unfinished)
        if self._reported is not None:
            tasks.append(self._reported)
        for t in tasks:
            t.cancel()
        for t in tasks:
            try:
                await t
            except BaseException:
                pass
        left = list(self._unfinished)  # left by a look cancelled just now
        for t in left:
            t.cancel()
        await asyncio.gather(*left, return_exceptions=True)
        for s in self._sentinels:
            await s.aclose()


class PrimaryConnection(Connection):
    """A connection to the primary the :class:`Follower` ``follower`` names
    when it connects; tells it of errors that may mean the primary moved."""

    def __init__(self, *, follower: Follower, **kwargs: Any) -> None:
        self._follower = follower
        super().__init__(**kwargs)

    async def _connect(self) -> None:
        # Every socket redis-py opens (connect, or a reconnect of its own)
        # goes to the address named now.
        self.host, self.port = await self._follower.current()
        await super()._connect()

    async def connect(self) -> None:
        if self.is_connected:
            return
        f = self._follower
        for _ in range(3):
            try:
                # Bounded: a connect must not outlast the follower's timeouts
                # whatever the redis-py version retries.
                await asyncio.wait_for(super().connect(), 2 * f.timeout)
            except (asyncio.TimeoutError, OSError, rexc.RedisError) as e:
                f.report()
                raise rexc.ConnectionError(
                    f"primary {self.host}:{self.port}: {str(e) or type(e).__name__}") from None
            if f.address == (self.host, self.port):
                return
            await self.disconnect(nowait=True)  # it moved while we connected
        raise rexc.ConnectionError("the primary moved while connecting")

    async def read_response(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return await super().read_response(*args, **kwargs)
        except rexc.ReadOnlyError:
            # A demoted primary: look again; the caller's call may be re-sent.
            self._follower.report()
            await self.disconnect(nowait=True)
            raise rexc.ConnectionError("the primary was demoted (READONLY)") from None
        except (rexc.ConnectionError, rexc.TimeoutError):
            self._follower.report()
            raise
