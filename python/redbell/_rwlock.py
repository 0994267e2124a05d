"""The RwLock: many readers or one writer, writers preferred (PROTOCOL.md,
"RwLock"). Readers hold a member of ``B:readers``; the writer holds ``B``
(token letter ``w``), so writers' fences continue the name's fence.

The wait loop differs from the other kinds' (``Client._acquire``) in three
ways, all from the protocol: the channel is ``B:rw``, a broadcast (every
message wakes every waiter of the client, which attempts); a reader passes
no member; every waiting writer passes its own intent ``C:W`` (which holds
new readers back) and withdraws it with ``rw_pass`` when it leaves without
the lock. Subscription, the armed wake-up, bounded parks, timeouts and
cancel safety are the other kinds'.
"""

import asyncio
import uuid
from typing import Optional

from ._calls import (_answered, _check_name, _Keys, _lease_ms,
                     DEFAULT_LEASE)
from ._client import Client
from ._guard import Guard
from .errors import InvalidLease, Timeout


class RwLock:
    """A distributed read-write lock: :meth:`read` for a shared hold,
    :meth:`write` for an exclusive one. A waiting writer holds new readers
    back (writer preference); a writer frozen while waiting holds them back
    for at most 500 ms after each release. Readers' guards have the name's
    current fence (a reader advances none); a writer's fence is strictly
    greater than every earlier one. Shares locks with the Rust ``RwLock``.
    Create it with :meth:`Client.rwlock`."""

    def __init__(self, client: Client, name: str, lease: float = DEFAULT_LEASE) -> None:
        _check_name(name)
        self._client = client
        self._keys = _Keys(client.prefix, name)
        self._lease_ms = _lease_ms(lease)
        self.name = name
        """The lock's name."""

    async def read(self, timeout: Optional[float] = None) -> Guard:
        """Wait for a read hold (shared with other readers).

        ``timeout``: seconds to wait at most (None: as long as it takes).

        Raises:
            Timeout: not acquired within ``timeout``.
            KindConflict: the name is in use as another kind of lock.
            ProtocolMismatch, RedisError, NoPermission, WrongType: as ``Mutex.lock``.

        Cancel safety: cancelling leaves nothing behind: an attempt in flight
        has its token released in the background.
        """
        return await _acquire(self._client, "read", self._keys, self._lease_ms, timeout, True)

    async def try_read(self) -> Optional[Guard]:
        """One attempt at a read hold: the guard, or None if a writer holds
        or waits. Raises: as :meth:`read`, except Timeout. Cancel safety: as :meth:`read`."""
        return await _acquire(self._client, "read", self._keys, self._lease_ms, None, False)

    async def write(self, timeout: Optional[float] = None) -> Guard:
        """Wait for the write hold (exclusive); while waiting, new readers wait too.

        Raises: as :meth:`read`.

        Cancel safety: cancelling leaves nothing behind: an attempt in flight
        has its token released, and the writer's intent is withdrawn, in the
        background.
        """
        return await _acquire(self._client, "write", self._keys, self._lease_ms, timeout, True)

    async def try_write(self) -> Optional[Guard]:
        """One attempt at the write hold: the guard, or None if held.
        Raises: as :meth:`read`, except Timeout. Cancel safety: as :meth:`write`."""
        return await _acquire(self._client, "write", self._keys, self._lease_ms, None, False)


async def _acquire(c: Client, kind: str, k: _Keys, lease_ms: int, timeout: Optional[float],
                   wait: bool) -> Optional[Guard]:
    loop = asyncio.get_running_loop()
    deadline = None
    if timeout is not None:
        if not timeout >= 0:
            raise InvalidLease(f"timeout {timeout!r} s is negative")
        deadline = loop.time() + timeout
    token = ("r" if kind == "read" else "w") + uuid.uuid4().hex
    sent = loop.time()
    inflight: Optional[asyncio.Future] = c._start(kind, k, token, lease_ms, "", "", None)
    try:
        r = await inflight
    except BaseException:
        c._spawn(c._undo(inflight, kind, k, token, None, None))
        raise
    if r.acquired:
        return c._hold(kind, k, token, r.value, lease_ms, sent, None)
    if not wait:
        return None
    ch, w = c._hub.join(k.rw.encode(), k.b, kind, token, None)
    member: Optional[str] = None  # a writer's intent, once passed
    inflight = None
    try:
        while True:
            if deadline is not None and loop.time() >= deadline:
                raise Timeout(f"lock {k.name!r} not acquired within {timeout} s")
            if ch.confirmed is None or not ch.confirmed.done():
                await c._wait_until(c._hub.subscribe(ch), deadline, k)  # duty 3
            w.event.clear()  # duty 4: armed before the attempt
            w.woken = False
            sent = loop.time()
            m = f"{c.id}:{w.id}" if kind == "write" else ""
            inflight = c._start(kind, k, token, lease_ms, m, "", None)
            if m:
                member = m
            r = await inflight
            inflight = None
            if r.acquired:
                member = None  # the acquire withdrew the intent
                return c._hold(kind, k, token, r.value, lease_ms, sent, None)
            await c._park(w, r.value, deadline)  # duty 7
    except BaseException:
        if inflight is not None or member is not None:  # duties 9 and 10
            done: asyncio.Future = inflight or _answered(None)
            c._spawn(c._undo(done, kind, k, token, None, member))
        raise
    finally:
        c._hub.leave(ch, w)
