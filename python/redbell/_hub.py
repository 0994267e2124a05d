"""The pub/sub side of a client: one connection, one subscription per lock
with waiters, messages routed to the waiter they name (PROTOCOL.md,
"Messages" and "Client duties").

Runs in one task per client (``Hub._run``), started by the first waiter that
needs a subscription, so an uncontended lock costs no ``SUBSCRIBE``:

- **Confirmed subscriptions.** ``subscribe`` returns once the server's
  ``subscribe`` reply for the channel was read; the waiter then attempts
  again before it parks (duty 3), so a release between its failed attempt
  and the subscription is never lost.
- **Linger.** A channel whose last waiter left stays subscribed for
  ``LINGER`` seconds, so a hot lock does not SUBSCRIBE/UNSUBSCRIBE per
  acquisition; a wake-up arriving meanwhile for a waiter that is gone is
  passed on (duty 9) by the client, and so is a fair grant unless the
  client still holds the acquisition it names.
- **One place per client per lock** (duty 6): the channel's ``queuer`` is
  the only local waiter that passes a member; when it leaves, the oldest
  remaining waiter gets the place (``turn``) and attempts at once.
- **Liveness.** While connected, a ``PING`` goes out every ``PROBE``
  seconds; no ``pong`` within half of it counts as a dead connection. Any
  loss (reset, EOF, silent peer) closes the connection; the task connects
  again, resubscribes every channel, and wakes every waiter of a channel
  once its subscription is confirmed, since messages sent meanwhile are lost.
"""

import asyncio
import itertools
from collections import OrderedDict
from typing import Callable, Dict, Iterator, Optional

from redis.asyncio.connection import ConnectionPool

from ._mux import pack
from ._resp import RespProtocol, take_over

LINGER = 2.0
"""Seconds a subscription outlives its last waiter (Rust ``subscription_linger``)."""
PROBE = 1.0
"""Seconds between liveness PINGs (Rust ``probe_interval``)."""


class Reconnect(Exception):
    """What a connection class's ``hub_reply`` makes of a reply that leaves
    its connection of no use (a cluster node refused a subscription): the
    hub drops the connection, connects again and resubscribes."""


class Waiter:
    """One local waiter of one lock (one ``lock()`` call that is waiting)."""

    __slots__ = ("id", "token", "event", "woken", "turn", "standby_until")

    def __init__(self, wid: int, token: str) -> None:
        self.id = wid
        """Unique within the client; the ``W`` of its member ``C:W``."""
        self.token = token
        """This acquisition's token (a fair grant must name it)."""
        self.event = asyncio.Event()
        """Set by any message or turn for this waiter; cleared before each attempt."""
        self.woken = False
        """A wake-up or grant arrived since the last attempt was armed: attempt now."""
        self.turn = False
        """The queue place was handed to this waiter: attempt now, with the member."""
        self.standby_until: Optional[float] = None
        """Loop time a standby's window ends (the park ends no later); None: no standby."""


class Channel:
    """The subscription of one lock's wake channel ``B:wake:C`` (or ``B:rw``)."""

    def __init__(self, name: bytes, base: str, kind: str, permits: Optional[int]) -> None:
        self.name = name
        self.base = base
        self.kind = kind
        """The kind of lock its waiters wait for: picks the pass-on script."""
        self.permits = permits
        self.waiters: "OrderedDict[int, Waiter]" = OrderedDict()
        """Local waiters, oldest first."""
        self.queuer: Optional[int] = None
        """The one waiter that passes a member (duty 6), or None."""
        self.confirmed: Optional[asyncio.Future] = None
        """Resolved when the server confirmed the subscription on the current
        connection; None while no SUBSCRIBE is out on it."""
        self.wake_all_on_confirm = False
        """Set by a reconnect: messages may have been lost, wake every waiter."""
        self.linger: Optional[asyncio.TimerHandle] = None

    def take_place(self, w: Waiter) -> bool:
        """Whether ``w`` holds (or now takes) the client's queue place."""
        if self.queuer is None or self.queuer not in self.waiters:
            self.queuer = w.id
        return self.queuer == w.id


class Hub:
    """One client's pub/sub connection and waiter registry."""

    def __init__(self, url: Optional[str],
                 on_orphan: Callable[[Channel, int, Optional[str]], None],
                 pool: Optional[ConnectionPool] = None,
                 ids: Optional[Iterator[int]] = None, **kwargs) -> None:
        # RESP2: pushed messages come back from read_response as plain arrays
        # (redis-py 8 defaults to RESP3, whose pushes go to a handler instead).
        # ``pool`` (Sentinel, a cluster node): connections come from it instead.
        # ``ids``: the waiter ids, shared by a cluster client's hubs (a
        # channel moves between them with its waiters).
        self._pool = pool if pool is not None else ConnectionPool.from_url(
            url, protocol=2, **kwargs)
        self._on_orphan = on_orphan
        self._channels: Dict[bytes, Channel] = {}
        self._conn: Optional[RespProtocol] = None
        """The live connection's protocol (writes go through it), or None."""
        self._task: Optional[asyncio.Task] = None
        self._pong: Optional[asyncio.Event] = None
        self._shape_command: Optional[Callable[[tuple], list]] = None
        self._closed = False
        self._ids = ids if ids is not None else itertools.count(1)

    def subscribed(self, channel: bytes) -> bool:
        """Whether ``channel`` is subscribed and confirmed on the live
        connection (it has waiters, or lingers after its last one)."""
        ch = self._channels.get(channel)
        return ch is not None and ch.confirmed is not None and ch.confirmed.done() \
            and self._conn is not None

    def join(self, channel: bytes, base: str, kind: str, token: str,
             permits: Optional[int]) -> "tuple[Channel, Waiter]":
        """Register a waiter (local only: nothing is sent)."""
        ch = self._channels.get(channel)
        if ch is None:
            ch = Channel(channel, base, kind, permits)
            self._channels[channel] = ch
        if ch.linger is not None:
            ch.linger.cancel()
            ch.linger = None
        ch.kind, ch.permits = kind, permits
        w = Waiter(next(self._ids), token)
        ch.waiters[w.id] = w
        return ch, w

    def leave(self, ch: Channel, w: Waiter) -> None:
        """Unregister ``w``; hand its queue place to the oldest other waiter."""
        ch.waiters.pop(w.id, None)
        if ch.queuer == w.id:
            ch.queuer = None
            for other in ch.waiters.values():
                ch.queuer = other.id
                other.turn = True
                other.event.set()
                break
        if not ch.waiters and ch.linger is None and not self._closed:
            ch.linger = asyncio.get_running_loop().call_later(LINGER, self._drop, ch)

    def _drop(self, ch: Channel) -> None:
        ch.linger = None
        if ch.waiters or self._channels.get(ch.name) is not ch:
            return
        del self._channels[ch.name]
        conn = self._conn
        if conn is not None and ch.confirmed is not None:
            self._send(conn, "UNSUBSCRIBE", ch.name)

    async def subscribe(self, ch: Channel) -> None:
        """Return once ``ch`` is subscribed on the live connection
        (confirmed), or is no longer this hub's (a cluster slot moved:
        ``ClusterHub.subscribe`` asks its new node's hub).

        Cancel safety: cancelling only stops waiting; the subscription goes on.
        """
        if self._closed:
            from .errors import ClientClosed
            raise ClientClosed("client closed")
        if self._task is None:
            self._task = asyncio.ensure_future(self._run())
        while True:
            if self._channels.get(ch.name) is not ch:
                # Subscribing it here would leave the new hub's confirmation
                # to replace this one's, which nobody would then resolve.
                return
            if ch.confirmed is None and self._conn is not None:
                ch.confirmed = asyncio.get_running_loop().create_future()
                self._send(self._conn, "SUBSCRIBE", ch.name)
            if ch.confirmed is not None:
                fut = ch.confirmed
                await asyncio.shield(fut)
                if fut is ch.confirmed:
                    return
            else:
                await asyncio.sleep(0.01)  # connecting: _run subscribes it

    def _send(self, conn: RespProtocol, *args) -> None:
        try:
            if self._shape_command is None:
                conn.write(pack(args))
            else:  # a cluster node's connection: its sharded commands
                conn.write(b"".join(pack(c) for c in self._shape_command(args)))
        except Exception as e:  # the connection is gone: _run connects again
            conn.close(e)

    async def _probe(self, conn: RespProtocol, pong: asyncio.Event) -> None:
        while True:
            await asyncio.sleep(PROBE)
            pong.clear()
            self._send(conn, "PING")
            try:
                await asyncio.wait_for(pong.wait(), PROBE / 2)
            except asyncio.TimeoutError:
                conn.close(ConnectionError("no pong"))
                return

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while not self._closed:
            conn = self._pool.make_connection()
            probe = None
            try:
                await conn.connect()
                pong = asyncio.Event()
                lost = loop.create_future()
                # A connection class may speak another pub/sub dialect
                # (_cluster's sharded one): it shapes commands and replies.
                self._shape_command = getattr(conn, "hub_command", None)
                shape = getattr(conn, "hub_reply", None)
                proto = RespProtocol(
                    (lambda reply: self._dispatch(reply, pong)) if shape is None
                    else (lambda reply: self._dispatch(shape(reply), pong)),
                    lambda err: lost.done() or lost.set_result(err))
                take_over(conn, proto)
                self._conn = proto
                names = list(self._channels)
                for name in names:
                    ch = self._channels[name]
                    ch.confirmed = loop.create_future()
                if names:
                    self._send(proto, "SUBSCRIBE", *names)
                probe = asyncio.ensure_future(self._probe(proto, pong))
                await lost
            except asyncio.CancelledError:
                raise
            except Exception:
                pass
            finally:
                if probe is not None:
                    probe.cancel()
                self._conn = None
                await conn.disconnect(nowait=True)
                for ch in self._channels.values():
                    # The old confirmation is void: subscribe() waits for the
                    # new connection's; every waiter is woken once it comes.
                    old, ch.confirmed = ch.confirmed, None
                    if old is not None and not old.done():
                        old.set_result(None)
                    ch.wake_all_on_confirm = True
            if not self._closed:
                await asyncio.sleep(0.05)

    def _dispatch(self, reply, pong: asyncio.Event) -> None:
        if isinstance(reply, Reconnect):  # a connection class's verdict
            if self._conn is not None:
                self._conn.close(reply)
            return
        if not isinstance(reply, list) or not reply:
            if reply == b"PONG":  # PING outside subscribed mode (no channel left)
                pong.set()
            return
        kind = reply[0]
        if kind == b"pong":
            pong.set()
        elif kind == b"subscribe" and len(reply) >= 2:
            ch = self._channels.get(reply[1])
            if ch is not None and ch.confirmed is not None and not ch.confirmed.done():
                ch.confirmed.set_result(None)
                if ch.wake_all_on_confirm:
                    ch.wake_all_on_confirm = False
                    for w in ch.waiters.values():
                        w.woken = True
                        w.event.set()
        elif kind == b"message" and len(reply) >= 3:
            ch = self._channels.get(reply[1])
            if ch is not None:
                self._message(ch, reply[2])

    def _message(self, ch: Channel, payload: bytes) -> None:
        """Route one payload (grammar: PROTOCOL.md, "Messages"); a payload
        that does not parse is ignored, and none is trusted: each only ends
        or shortens a park."""
        if ch.kind in ("read", "write"):  # B:rw is a broadcast: every waiter attempts
            for w in ch.waiters.values():
                w.woken = True
                w.event.set()
            return
        try:
            parts = payload.decode("ascii").split(":")
            wid = int(parts[0])
        except (UnicodeDecodeError, ValueError):
            return
        w = ch.waiters.get(wid)
        if len(parts) == 1:  # wake-up
            if w is not None:
                w.woken = True
                w.event.set()
            else:
                self._on_orphan(ch, wid, None)
        elif len(parts) == 3 and parts[2][:1] == "s":  # standby
            try:
                ms = int(parts[2][1:])
            except ValueError:
                return
            if w is not None and (parts[1] == "" or parts[1] == w.token):
                until = asyncio.get_running_loop().time() + ms / 1000
                if w.standby_until is None or until < w.standby_until:
                    w.standby_until = until
                w.event.set()
        elif len(parts) == 4 and parts[2][:1] == "g":  # fair grant
            if w is not None and parts[1] == w.token:
                w.woken = True
                w.event.set()
            elif w is None and parts[1]:
                self._on_orphan(ch, wid, parts[1])
        # "W:?" (a fair probe) and anything else: ignored

    def reconnect(self) -> None:
        """Drop the connection (the primary moved): the task connects again,
        resubscribes every channel and wakes every waiter."""
        conn = self._conn
        if conn is not None:
            conn.close(ConnectionError("the primary moved"))

    async def aclose(self) -> None:
        """Stop the connection task and close the connection."""
        self._closed = True
        for ch in self._channels.values():
            if ch.linger is not None:
                ch.linger.cancel()
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except BaseException:
                pass
        await self._pool.disconnect()
