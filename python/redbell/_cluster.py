"""Redis Cluster (the Rust ``Client::cluster``): commands through redis-py's
asyncio ``RedisCluster``, wake-ups on sharded pub/sub.

Every key and channel of a lock carries its ``{name}`` hash tag, so each
lock lives in one slot; the scripts run in their ``SPUBLISH`` variant
(PROTOCOL.md, "Scripts"), and a waiter listens with ``SSUBSCRIBE`` on the
primary that owns its lock's slot.

redis-py has asyncio cluster pub/sub, ``SSUBSCRIBE`` included, only from
version 8.0 (``RedisCluster.pubsub()``, redis-py PR #3736); redbell
supports redis-py 5 and later, so the hub does not use it. It keeps one
pub/sub connection per primary instead (one :class:`~redbell._hub.Hub` per
node, whose connections speak ``SSUBSCRIBE`` / ``SUNSUBSCRIBE`` and read
``ssubscribe`` / ``smessage`` replies as their unsharded counterparts):

- a channel joins the hub of the primary that owns its slot;
- when a node connection fails (the node died: refused, reset, probe), the
  server sends ``sunsubscribe`` (the slot moved: failover, resharding) or
  it refuses an ``SSUBSCRIBE`` (``MOVED``: the slot moved while the
  subscription was in flight; the connection is then dropped), the slot
  map is read again and every channel whose slot moved goes to its new
  primary's hub, which subscribes it and wakes its waiters once confirmed
  (a message may have been lost meanwhile).

Renewals are batched per slot (one ``extend`` call cannot span slots).
"""

import asyncio
import itertools
from typing import Any, Callable, Dict, List, Optional, Sequence

from redis import exceptions as rexc
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.connection import Connection, ConnectionPool
from redis.connection import parse_url

from ._calls import RESPONSE_TIMEOUT, _map_error
from ._client import Client
from ._guard import Guard
from ._hub import Channel, Hub, Reconnect
from .errors import RedisError

REROUTE_PAUSE = 0.2
"""Seconds between readings of the slot map while a channel's node is lost."""


class _ShardConnection(Connection):
    """A pub/sub connection to one cluster node speaking sharded pub/sub
    to the server and unsharded pub/sub to the hub."""

    def __init__(self, *, on_lost: Callable[[], None], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._on_lost = on_lost
        self._leaving: set = set()

    def hub_command(self, args: tuple) -> List[tuple]:
        """The commands that carry the hub's ``args`` on this connection."""
        if args and args[0] in ("SUBSCRIBE", "UNSUBSCRIBE"):
            # One command per channel: one SSUBSCRIBE may not span slots.
            cmd = "S" + args[0]
            if cmd == "SUNSUBSCRIBE":
                self._leaving.update(args[1:])
            return [(cmd, ch) for ch in args[1:]]
        return [args]

    def hub_reply(self, reply: Any) -> Any:
        """A reply of this connection as the hub reads it (unsharded); an
        error reply as :class:`~redbell._hub.Reconnect`."""
        if isinstance(reply, Exception):
            # An SSUBSCRIBE refused: MOVED (its slot moved before it ran:
            # no sunsubscribe will come), ASK, CLUSTERDOWN. The hub drops
            # this connection, and the slot map is read again (disconnect):
            # the channels go where their slots are, subscribed and their
            # waiters woken once confirmed.
            return Reconnect(f"a subscription was refused: {reply}")
        if isinstance(reply, list) and reply:
            kind = reply[0]
            if kind == b"smessage":
                reply = [b"message", *reply[1:]]
            elif kind == b"ssubscribe":
                reply = [b"subscribe", *reply[1:]]
            elif kind == b"sunsubscribe" and len(reply) >= 2:
                if reply[1] in self._leaving:
                    self._leaving.discard(reply[1])
                else:
                    self._on_lost()  # the server's: the slot moved away
        return reply

    async def disconnect(self, *args: Any, **kwargs: Any) -> None:
        await super().disconnect(*args, **kwargs)
        self._on_lost()


class ClusterHub:
    """The hub of a cluster client: one :class:`Hub` per primary that owns
    a slot some waiter listens in, channels routed by slot."""

    def __init__(self, cluster: RedisCluster,
                 on_orphan: Callable[[Channel, int, Optional[str]], None],
                 conn_kwargs: Dict[str, Any]) -> None:
        self._cluster = cluster
        self._on_orphan = on_orphan
        self._conn_kwargs = conn_kwargs
        self._hubs: Dict[str, Hub] = {}
        self._ids = itertools.count(1)
        """Waiter ids, unique in the client: a channel moves to another
        node's hub with its waiters, and one id per hub would give a new
        waiter there the id (and queue member) of one of them."""
        self._reroute_task: Optional[asyncio.Task] = None
        self._closed = False

    def _node_hub(self, channel: bytes) -> Hub:
        try:
            node = self._cluster.get_node_from_key(channel)
        except rexc.RedisError as e:  # a slot not covered (mid-failover)
            raise RedisError(str(e)) from e
        if node is None:
            raise RedisError(f"no node serves the slot of {channel!r}")
        hub = self._hubs.get(node.name)
        if hub is None:
            pool = ConnectionPool(host=node.host, port=node.port, protocol=2,
                                  connection_class=_ShardConnection, on_lost=self._lost,
                                  socket_connect_timeout=RESPONSE_TIMEOUT, **self._conn_kwargs)
            hub = Hub(None, self._on_orphan, pool=pool, ids=self._ids)
            self._hubs[node.name] = hub
        return hub

    def join(self, channel: bytes, base: str, kind: str, token: str,
             permits: Optional[int]) -> Any:
        """Register a waiter in the hub that has (or should have) ``channel``."""
        hub = next((h for h in self._hubs.values() if channel in h._channels), None)
        if hub is None:
            hub = self._node_hub(channel)
        ch, w = hub.join(channel, base, kind, token, permits)
        ch.hub = hub  # type: ignore[attr-defined]
        return ch, w

    def subscribed(self, channel: bytes) -> bool:
        """Whether ``channel`` is subscribed and confirmed on its node's
        live connection (as :meth:`Hub.subscribed`)."""
        return any(h.subscribed(channel) for h in self._hubs.values())

    def leave(self, ch: Channel, w: Any) -> None:
        """Unregister a waiter (as :meth:`Hub.leave`)."""
        ch.hub.leave(ch, w)  # type: ignore[attr-defined]

    async def subscribe(self, ch: Channel) -> None:
        """Return once ``ch`` is subscribed on the node that owns its slot.

        Cancel safety: cancelling only stops waiting.
        """
        while True:
            hub = ch.hub  # type: ignore[attr-defined]
            await hub.subscribe(ch)
            if ch.hub is hub:  # type: ignore[attr-defined]
                return

    def _lost(self) -> None:
        if not self._closed and self._reroute_task is None:
            self._reroute_task = asyncio.ensure_future(self._reroute())

    async def _reroute(self) -> None:
        """Read the slot map again; move every channel whose slot moved."""
        try:
            await asyncio.sleep(REROUTE_PAUSE)
            try:
                await self._cluster.nodes_manager.initialize()
            except Exception:
                return  # the next loss tries again
            loop = asyncio.get_running_loop()
            for src in list(self._hubs.values()):
                for name, ch in list(src._channels.items()):
                    try:
                        dst = self._node_hub(name)
                    except RedisError:
                        self._lost()  # not covered yet: read the map again later
                        continue
                    if dst is src:
                        continue
                    del src._channels[name]
                    if not ch.waiters:
                        if ch.linger is not None:
                            ch.linger.cancel()
                        continue  # lingering only: dropped
                    old, ch.confirmed = ch.confirmed, None
                    if old is not None and not old.done():
                        old.set_result(None)
                    ch.wake_all_on_confirm = True
                    ch.hub = dst  # type: ignore[attr-defined]
                    dst._channels[name] = ch
                    if dst._task is None:
                        dst._task = asyncio.ensure_future(dst._run())
                    elif dst._conn is not None:
                        ch.confirmed = loop.create_future()
                        dst._send(dst._conn, "SUBSCRIBE", name)
            for key, hub in list(self._hubs.items()):
                if not hub._channels:  # a node no waiter needs now
                    del self._hubs[key]
                    self._spawn_close(hub)
        finally:
            self._reroute_task = None

    def _spawn_close(self, hub: Hub) -> None:
        asyncio.ensure_future(hub.aclose())

    async def aclose(self) -> None:
        """Close every node's pub/sub connection."""
        self._closed = True
        if self._reroute_task is not None:
            self._reroute_task.cancel()
        await asyncio.gather(*(h.aclose() for h in self._hubs.values()),
                             return_exceptions=True)


class ClusterClient(Client):
    """A :class:`Client` on a Redis Cluster (made by :func:`connect_cluster`):
    the same handles and guards; renewals go out per slot."""

    async def _renew(self, gs: List[Guard], lease_ms: int) -> None:
        by_slot: Dict[int, List[Guard]] = {}
        for g in gs:
            by_slot.setdefault(self._redis.keyslot(g._keys.b), []).append(g)
        await asyncio.gather(*(super(ClusterClient, self)._renew(group, lease_ms)
                               for group in by_slot.values()))


async def connect_cluster(nodes: Sequence[str], *, prefix: str = "redbell") -> Client:
    """Connect to the Redis Cluster that ``nodes`` (URLs of some of its
    nodes, ``redis://[[user]:password@]host:port``) belong to.

    Locks, guards and waiting work as on one server; wake-ups use sharded
    pub/sub (``SPUBLISH`` / ``SSUBSCRIBE``, Redis 7.0+), so they stay in the
    lock's shard. Failovers and slot migrations are followed: the commands
    by redis-py's ``RedisCluster``, the subscriptions by the hub, which
    moves each channel to its slot's new primary and wakes its waiters. A
    call in flight during a failover fails with :class:`RedisError`: call
    again. The credentials are those of the first URL (every node shares
    them).

    Raises:
        RedisError: a URL is malformed, or no node answers.
        InvalidName: the prefix is invalid.

    Cancel safety: cancelling leaves no connection open.
    """
    if isinstance(nodes, str):
        nodes = [nodes]
    startup, creds = [], {}
    for i, url in enumerate(nodes):
        try:
            opts = parse_url(url)
        except ValueError as e:
            raise RedisError(f"cluster node URL {url!r}: {e}") from None
        if "host" not in opts:
            raise RedisError(f"cluster node URL {url!r}: a redis:// URL with a host")
        startup.append(ClusterNode(opts["host"], int(opts.get("port") or 6379)))
        if i == 0:
            creds = {k: opts[k] for k in ("username", "password") if opts.get(k)}
    if not startup:
        raise RedisError("connect_cluster: no node URL given")
    cluster = RedisCluster(startup_nodes=startup, protocol=2, socket_timeout=RESPONSE_TIMEOUT,
                           socket_connect_timeout=RESPONSE_TIMEOUT, **creds)
    client = ClusterClient(None, prefix, _redis=cluster, _sharded=True,
                           _hub=lambda orphan: ClusterHub(cluster, orphan, creds))
    try:
        await cluster.initialize()
        await cluster.ping()
    except BaseException as e:
        await cluster.aclose()
        if isinstance(e, rexc.RedisError):
            raise _map_error(e) from e
        raise
    return client
