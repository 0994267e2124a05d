"""The lock handles: :class:`Mutex`, :class:`FairMutex` and
:class:`Semaphore`, each waiting through its client's ``_acquire``."""

import asyncio
from typing import TYPE_CHECKING, Any, Dict, List, Optional

from ._calls import _check_name, _Keys, _lease_ms
from ._guard import Guard

if TYPE_CHECKING:
    from ._client import Client


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
