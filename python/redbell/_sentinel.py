"""Redis Sentinel: a client whose primary is the one the sentinels name,
followed across failovers (the Rust ``Client::sentinel``).

Where the primary is comes from a :class:`~redbell._follow.Follower`: it
listens to every sentinel's ``+switch-master`` and is told of every error
that may mean the primary moved; when it moves, every connection opened
from then on goes to the new primary, and the client drops those to the
old one:

- the command connection (the mux): a call in flight on it fails with a
  connection error and is sent once more, to the new primary (every script
  is idempotent, PROTOCOL.md "Failure rules");
- the hub's pub/sub connection: it connects to the new primary,
  resubscribes and wakes every waiter, which attempts there;
- the pooled connections of ``Client._redis``.
"""

import asyncio
from typing import Any, Optional, Sequence, Tuple

import redis.asyncio as aioredis
from redis import exceptions as rexc
from redis.asyncio.connection import ConnectionPool
from redis.connection import parse_url

from ._calls import POOL_SIZE, RESPONSE_TIMEOUT, _map_error
from ._client import Client
from ._follow import Follower, PrimaryConnection
from ._hub import Hub
from .errors import RedisError


CONNECT_WAIT = 10.0
"""Seconds connect_sentinel waits for the named primary to answer."""


def _sentinel_node(url: str) -> Tuple[str, int, dict]:
    """Host, port and connection options (credentials, TLS) of one sentinel URL."""
    try:
        opts = parse_url(url)
    except ValueError as e:
        raise RedisError(f"sentinel URL {url!r}: {e}") from None
    host = opts.pop("host", None)
    port = int(opts.pop("port", 26379) or 26379)
    if host is None:
        raise RedisError(f"sentinel URL {url!r}: a redis:// or rediss:// URL with a host")
    opts.pop("db", None)
    return host, port, opts


async def connect_sentinel(sentinels: Sequence[str], master_name: str, *,
                           username: Optional[str] = None, password: Optional[str] = None,
                           db: int = 0, prefix: str = "redbell") -> Client:
    """Connect to the primary that the Redis Sentinels at ``sentinels`` name
    for ``master_name``, and follow it across failovers.

    ``sentinels``: URLs of the sentinels (``redis://[[user]:password@]host:port``),
    carrying the sentinels' own credentials. ``username``, ``password`` and
    ``db`` are the primary's (and its replicas'). ``prefix``: as :func:`connect`.

    The returned :class:`Client` is used exactly as one from :func:`connect`.
    Waiters parked across a failover stay parked: the hub reconnects to the
    new primary, resubscribes, and wakes every waiter to attempt there. A
    call in flight while the primary is unreachable (until the sentinels
    have promoted a replica) fails with :class:`RedisError`: call again.
    Replication is asynchronous, so a failover may lose the last acquire or
    renewal (two holders are possible; fence at the resource).

    Raises:
        RedisError: a URL is malformed, no sentinel answers, none knows the
            master, or no primary they name answers a PING within 10 s.
        InvalidName: the prefix is invalid.

    Cancel safety: cancelling leaves no connection open.
    """
    if isinstance(sentinels, str):
        sentinels = [sentinels]
    nodes = [_sentinel_node(u) for u in sentinels]
    if not nodes:
        raise RedisError("connect_sentinel: no sentinel URL given")
    primary: Any = dict(username=username, password=password, db=db, protocol=2)
    follower = Follower(nodes, master_name, primary, RESPONSE_TIMEOUT)
    try:
        await follower.start()
    except BaseException as e:
        await follower.aclose()
        if isinstance(e, rexc.RedisError):
            raise _map_error(e) from e
        raise
    conns: Any = dict(connection_class=PrimaryConnection, follower=follower,
                      socket_connect_timeout=RESPONSE_TIMEOUT, **primary)
    # Script calls go through the client's mux (one connection of this
    # pool); the pool itself carries only the connect PING. Not a
    # BlockingConnectionPool: redis-py 5.0.1's deadlocks for good once a
    # connect fails (its get_connection holds the pool's condition while a
    # failed connect releases the connection, which takes it again).
    commands = ConnectionPool(max_connections=POOL_SIZE, socket_timeout=RESPONSE_TIMEOUT,
                              **conns)
    pubsub = ConnectionPool(**conns)
    client = Client(None, prefix, _redis=aioredis.Redis(connection_pool=commands),
                    _hub=lambda orphan: Hub(None, orphan, pool=pubsub))

    def moved() -> None:
        if client._mux is not None:
            client._mux.drop()
        client._hub.reconnect()
        asyncio.ensure_future(commands.disconnect())
    follower.on_move.append(moved)
    client._on_close.append(follower.aclose)
    try:
        # Bounded: the primary found may fail before it answers.
        ping = asyncio.ensure_future(client._redis.ping())
        done, _ = await asyncio.wait({ping}, timeout=CONNECT_WAIT)
        if not done:
            ping.cancel()
            raise RedisError(f"no primary for {master_name!r} answered within "
                             f"{CONNECT_WAIT} s (sentinels: {', '.join(sentinels)})")
        ping.result()
    except BaseException as e:
        await client._redis.aclose()
        await follower.aclose()
        if isinstance(e, rexc.RedisError):
            raise _map_error(e) from e
        raise
    return client
