"""The synchronous face, for scripts and WSGI code: the same names as the
asyncio client, without ``await``.

A :class:`SyncClient` runs one asyncio client on an event loop of its own,
in a daemon thread; each call is submitted to that loop and waited for. An
exception raised in the calling thread while it waits (``KeyboardInterrupt``)
cancels the call on the loop, which is cancel-safe: nothing is left behind.
"""

import asyncio
import threading
from typing import TYPE_CHECKING, Any, Awaitable, Callable, List, Optional, Sequence

from . import _client, _cluster, _sentinel
from ._calls import DEFAULT_LEASE
from ._guard import Guard
from .errors import NotHeld

if TYPE_CHECKING:
    from ._handles import _Handle


class SyncClient:
    """A blocking redbell client. Create it with :func:`connect`; close it
    with :meth:`close` (or use it as a context manager)."""

    def __init__(self, url: Optional[str], prefix: str = "redbell", *,
                 _connect: Optional[Callable[[], Awaitable[_client.Client]]] = None) -> None:
        # _connect: makes the asyncio client (connect_sentinel, connect_cluster).
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever,
                                        name="redbell-sync", daemon=True)
        self._thread.start()
        try:
            coro = _connect() if _connect is not None else _client.connect(url, prefix)
            self._client: _client.Client = self._run(coro)
        except BaseException:
            self._stop()
            raise

    def _run(self, coro) -> Any:
        fut = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return fut.result()
        except BaseException:
            fut.cancel()
            raise

    def _stop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    @property
    def id(self) -> str:
        """The client id (32 lowercase hex digits)."""
        return self._client.id

    def mutex(self, name: str, lease: float = DEFAULT_LEASE) -> "SyncLock":
        """A Mutex handle. Raises InvalidName, InvalidLease."""
        return SyncLock(self, self._client.mutex(name, lease))

    def fair_mutex(self, name: str, lease: float = DEFAULT_LEASE) -> "SyncLock":
        """A FairMutex handle. Raises InvalidName, InvalidLease."""
        return SyncLock(self, self._client.fair_mutex(name, lease))

    def semaphore(self, name: str, permits: int,
                  lease: float = DEFAULT_LEASE) -> "SyncLock":
        """A Semaphore handle; ``lock`` takes one permit.
        Raises InvalidName, InvalidLease, InvalidPermits."""
        return SyncLock(self, self._client.semaphore(name, permits, lease))

    def rwlock(self, name: str, lease: float = DEFAULT_LEASE) -> "SyncRwLock":
        """An RwLock handle. Raises InvalidName, InvalidLease."""
        return SyncRwLock(self, self._client.rwlock(name, lease))

    def election(self, name: str, lease: float = DEFAULT_LEASE) -> "SyncElection":
        """An Election handle. Raises InvalidName, InvalidLease."""
        return SyncElection(self, self._client.election(name, lease))

    def close(self) -> None:
        """Release held locks, close the connections and stop the loop thread."""
        try:
            self._run(self._client.aclose())
        finally:
            self._stop()

    def __enter__(self) -> "SyncClient":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class SyncGuard:
    """A held lock: ``fence``, ``token``, ``name``, ``is_lost``, :meth:`unlock`."""

    def __init__(self, client: SyncClient, guard: Guard) -> None:
        self._client = client
        self._guard = guard
        self.name = guard.name
        """The lock's name."""
        self.token = guard.token
        """The owner token."""
        self.fence = guard.fence
        """The fencing token (strictly increasing per name, across languages)."""

    @property
    def is_lost(self) -> bool:
        """Whether the hold is known lost."""
        return self._guard.is_lost

    def wait_lost(self, timeout: Optional[float] = None) -> bool:
        """Block until the hold is lost (True) or ``timeout`` s pass (False)."""
        async def wait() -> bool:
            try:
                await asyncio.wait_for(self._guard.lost.wait(), timeout)
                return True
            except asyncio.TimeoutError:
                return False
        return self._client._run(wait())

    def unlock(self) -> None:
        """Release the lock. Raises NotHeld if it was no longer held."""
        self._client._run(self._guard.unlock())

    def __enter__(self) -> "SyncGuard":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            self.unlock()
        except NotHeld:
            if exc_type is None:
                raise


class SyncLock:
    """A blocking Mutex, FairMutex or Semaphore handle."""

    def __init__(self, client: SyncClient, handle: "_Handle") -> None:
        self._client = client
        self._handle = handle
        self._local = threading.local()
        self.name = handle.name
        """The lock's name."""

    def lock(self, timeout: Optional[float] = None) -> SyncGuard:
        """Wait for the lock (at most ``timeout`` s). Raises Timeout and as
        the asyncio ``lock``."""
        return SyncGuard(self._client, self._client._run(self._handle.lock(timeout)))

    acquire = lock

    def try_lock(self) -> Optional[SyncGuard]:
        """One attempt: the guard, or None if held."""
        g = self._client._run(self._handle.try_lock())
        return None if g is None else SyncGuard(self._client, g)

    try_acquire = try_lock

    def __enter__(self) -> SyncGuard:
        g = self.lock()
        stack: List[SyncGuard] = self._local.__dict__.setdefault("stack", [])
        stack.append(g)
        return g

    def __exit__(self, exc_type, exc, tb) -> None:
        self._local.stack.pop().__exit__(exc_type, exc, tb)


class SyncRwLock:
    """A blocking RwLock handle: ``read``, ``write``, ``try_read``, ``try_write``."""

    def __init__(self, client: SyncClient, handle: Any) -> None:
        self._client = client
        self._handle = handle
        self.name = handle.name
        """The lock's name."""

    def _guard(self, g: Optional[Guard]) -> Optional[SyncGuard]:
        return None if g is None else SyncGuard(self._client, g)

    def read(self, timeout: Optional[float] = None) -> SyncGuard:
        """Wait for a read hold (at most ``timeout`` s). Raises as the asyncio ``read``."""
        return SyncGuard(self._client, self._client._run(self._handle.read(timeout)))

    def write(self, timeout: Optional[float] = None) -> SyncGuard:
        """Wait for the write hold (at most ``timeout`` s). Raises as the asyncio ``write``."""
        return SyncGuard(self._client, self._client._run(self._handle.write(timeout)))

    def try_read(self) -> Optional[SyncGuard]:
        """One attempt at a read hold: the guard, or None."""
        return self._guard(self._client._run(self._handle.try_read()))

    def try_write(self) -> Optional[SyncGuard]:
        """One attempt at the write hold: the guard, or None."""
        return self._guard(self._client._run(self._handle.try_write()))


class SyncLeadership:
    """A blocking Leadership: ``term``, ``value``, ``is_lost``, :meth:`proclaim`, :meth:`resign`."""

    def __init__(self, client: SyncClient, leadership: Any) -> None:
        self._client = client
        self._leadership = leadership
        self.term: int = leadership.term
        """The term (strictly increasing per election, across languages)."""

    @property
    def value(self) -> str:
        """The value last proclaimed."""
        return self._leadership.value

    @property
    def is_lost(self) -> bool:
        """Whether the leadership is known lost."""
        return self._leadership.is_lost

    def proclaim(self, value: str) -> None:
        """Publish a new value. Raises NotHeld if the leadership was lost."""
        self._client._run(self._leadership.proclaim(value))

    def resign(self) -> None:
        """End the term. Raises NotHeld if it had ended."""
        self._client._run(self._leadership.resign())


class SyncElection:
    """A blocking Election handle: :meth:`campaign`, :meth:`leader`."""

    def __init__(self, client: SyncClient, handle: Any) -> None:
        self._client = client
        self._handle = handle
        self.name = handle.name
        """The election's name."""

    def campaign(self, value: str, timeout: Optional[float] = None) -> SyncLeadership:
        """Wait until leading (at most ``timeout`` s), proclaim ``value``.
        Raises as the asyncio ``campaign``."""
        return SyncLeadership(self._client, self._client._run(self._handle.campaign(value, timeout)))

    def leader(self) -> Any:
        """The current :class:`redbell.Leader`, or None."""
        return self._client._run(self._handle.leader())


def connect(url: str, prefix: str = "redbell") -> SyncClient:
    """Connect (blocking). Raises RedisError if the server does not answer."""
    return SyncClient(url, prefix)


def connect_sentinel(sentinels: Sequence[str], master_name: str, *,
                     username: Optional[str] = None, password: Optional[str] = None,
                     db: int = 0, prefix: str = "redbell") -> SyncClient:
    """Connect through Redis Sentinel (blocking); arguments, failover
    behaviour and errors as :func:`redbell.connect_sentinel`."""
    return SyncClient(None, prefix, _connect=lambda: _sentinel.connect_sentinel(
        sentinels, master_name, username=username, password=password, db=db, prefix=prefix))


def connect_cluster(nodes: Sequence[str], *, prefix: str = "redbell") -> SyncClient:
    """Connect to a Redis Cluster (blocking); arguments and errors as
    :func:`redbell.connect_cluster`."""
    return SyncClient(None, prefix, _connect=lambda: _cluster.connect_cluster(
        nodes, prefix=prefix))


__all__ = ["SyncClient", "SyncElection", "SyncGuard", "SyncLeadership", "SyncLock",
           "SyncRwLock", "connect", "connect_cluster", "connect_sentinel"]
