"""Leader election (PROTOCOL.md, "Election"): a campaign is a Mutex acquire
with token letter ``l`` on the election's name, its fence is the term, and
the leader's value lives in ``B:leader``; changes are published on
``B:leader:events``. Shares elections with the Rust ``Election``."""

import asyncio
from typing import Any, NamedTuple, Optional

from ._calls import DEFAULT_LEASE, FENCE_TTL_MS
from ._client import Client
from ._guard import Guard
from ._handles import Mutex
from .errors import NotHeld, RedisError


class Leader(NamedTuple):
    """The leader of an election: its term (the fence of its acquisition,
    strictly greater than every earlier term) and its value."""

    term: int
    value: str


def _text(v: Any) -> str:
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)


class Election:
    """An election among every client, of any language, that campaigns for
    one name. Create it with :meth:`Client.election`."""

    def __init__(self, client: Client, name: str, lease: float = DEFAULT_LEASE) -> None:
        self._client = client
        self._mutex = Mutex(client, name, lease)  # validates name and lease
        self._mutex._kind = "election"
        k = self._mutex._keys
        self._leader_key = k.b + ":leader"
        self._channel = k.b + ":leader:events"
        self.name = name
        """The election's name."""

    async def campaign(self, value: str, timeout: Optional[float] = None) -> "Leadership":
        """Wait until this client leads, proclaim ``value``, and return the
        :class:`Leadership` (renewed in the background while it lives).

        Waiting is ``Mutex.lock``'s: parked until the leader resigns or its
        lease runs out. Should the lease run out between the acquire and
        the proclamation, the campaign starts over.

        Raises:
            Timeout: not elected within ``timeout`` seconds.
            KindConflict: the name is in use as another kind of lock.
            ProtocolMismatch, RedisError, NoPermission, WrongType: as ``Mutex.lock``.

        Cancel safety: cancelling leaves no leader behind: an acquire in
        flight is released in the background; a term acquired but not yet
        returned is resigned and released in the background.
        """
        while True:
            guard = await self._mutex.lock(timeout)
            ship = Leadership(self, guard, value)
            try:
                done = await asyncio.shield(asyncio.ensure_future(ship._proclaim(value, True)))
            except BaseException:
                self._client._spawn(ship._resign_quietly())
                raise
            if done and not guard.is_lost:
                return ship
            await ship._resign_quietly()  # lost before the proclamation: again

    async def leader(self) -> Optional[Leader]:
        """The current leader, or None: one atomic read of the lock's holder
        and the leader key.

        Raises: RedisError, WrongType, NoPermission, ProtocolMismatch.

        Cancel safety: it only reads.
        """
        k = self._mutex._keys
        r = await self._client._call("elect_leader", [k.b, self._leader_key], [])
        if int(r[0]) == 1:
            return Leader(int(_text(r[1])), _text(r[4]))
        return None


class Leadership:
    """This client's term as leader: ``term``, ``value``, ``lost``; end it
    with :meth:`resign`."""

    def __init__(self, election: Election, guard: Guard, value: str) -> None:
        self._election = election
        self._guard = guard
        self.value = value
        """The value last proclaimed."""
        self.term = guard.fence
        """The term: the fence of the acquisition, strictly increasing."""
        self.lost = guard.lost
        """An ``asyncio.Event`` set once the leadership is lost (lease
        expired or taken)."""
        self.name = election.name
        """The election's name."""

    @property
    def is_lost(self) -> bool:
        """Whether the leadership is known lost."""
        return self._guard.is_lost

    async def _proclaim(self, value: str, elected: bool) -> bool:
        e = self._election
        r = await e._client._call(
            "elect_proclaim", [e._mutex._keys.b, e._leader_key],
            [self._guard.token, self.term, value, "elected" if elected else "proclaimed",
             e._channel, FENCE_TTL_MS])
        return int(r[0]) == 1

    async def proclaim(self, value: str) -> None:
        """Publish a new value for this term.

        Raises:
            NotHeld: the leadership was lost.
            RedisError: from the server.

        Cancel safety: the proclamation may or may not have been applied.
        """
        if self.is_lost:
            raise NotHeld(f"election {self.name!r}: leadership lost")
        if not await self._proclaim(value, False):
            self._guard.lost.set()
            raise NotHeld(f"election {self.name!r}: leadership lost")
        self.value = value

    async def resign(self) -> None:
        """End the term: clear the leader key (publishing ``resigned``), then
        release the lock, which wakes one campaigner.

        Raises:
            NotHeld: the leadership had been lost or resigned already.
            RedisError: from the server (the lease then ends the term).

        Cancel safety: the resignation runs to its end in the background.
        """
        await asyncio.shield(asyncio.ensure_future(self._resign()))

    async def _resign(self) -> None:
        e = self._election
        try:
            await e._client._call("elect_resign", [e._leader_key],
                                  [self._guard.token, e._channel])
        except RedisError:
            pass  # the release below still ends the term
        await self._guard.unlock()

    async def _resign_quietly(self) -> None:
        try:
            await self._resign()
        except Exception:
            pass
