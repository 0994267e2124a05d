"""The held lock: :class:`Guard`, renewed by its client's renewal task."""

import asyncio
from typing import TYPE_CHECKING, Optional

from ._calls import _Keys
from .errors import NotHeld

if TYPE_CHECKING:
    from ._client import Client


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
        self._loop = asyncio.get_running_loop()
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
        """Whether the hold is lost (a lost hold is never renewed again):
        ``lost`` is set, or the local deadline has passed unconfirmed. The
        deadline is read here, not only by the renewal task: a process
        resumed after a freeze longer than the lease sees the loss before
        its next act, whichever of its tasks the event loop runs first."""
        return self.lost.is_set() or (not self._done and self._loop.time() >= self._deadline)

    async def unlock(self) -> None:
        """Release the lock.

        Raises:
            NotHeld: it was no longer held (expired, or taken by another token).
            RedisError: the release could not be sent (the lease then ends
                it), or its reply was lost and the release, sent again,
                found the lock not held: whether the hold lasted until the
                release is unknown.
            NoPermission, WrongType: the server refused the release (an
                ACL without the right, a key of another type): the lease
                ends the hold.

        Cancel safety: renewal stops at once and the release runs to its end
        in the background.
        """
        if self._done:
            raise NotHeld(f"lock {self.name!r} was already released")
        self._done = True
        self._client._holds.discard(self)
        # Sent before the first await: a cancelled unlock still releases.
        code = await self._client._release(self._kind, self._keys, self.token, self._permits)
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
