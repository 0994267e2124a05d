"""Redis Sentinel: a client whose primary is the one the sentinels name,
followed across failovers (the Rust ``Client::sentinel``).

Both sides of the client ask the sentinels for the primary whenever they
connect, through redis-py's asyncio Sentinel support:

- the command pool holds ``SentinelManagedConnection`` objects: a
  connection that fails (refused, reset, timed out) or answers ``READONLY``
  (the old primary, demoted) is dropped, and the next one is opened to the
  address the sentinels name then; redis-py retries a call that failed on a
  dropped connection, so a call in flight during a failover either
  succeeds on the new primary or fails with :class:`RedisError`;
- the hub's pub/sub connection comes from a pool of the same kind: after a
  loss (the primary killed: reset or the liveness probe) it connects to the
  primary named then, resubscribes and wakes every waiter, which attempts
  on the new primary.
"""

import asyncio
from typing import Any, Optional, Sequence, Tuple

import redis.asyncio as aioredis
from redis import exceptions as rexc
from redis.asyncio.connection import BlockingConnectionPool
from redis.asyncio.sentinel import Sentinel, SentinelConnectionPool
from redis.connection import parse_url

from ._calls import POOL_SIZE, RESPONSE_TIMEOUT, _map_error
from ._client import Client
from ._hub import Hub
from .errors import RedisError


CONNECT_WAIT = 10.0
"""Seconds connect_sentinel waits for the named primary to answer."""


class _BlockingSentinelPool(SentinelConnectionPool, BlockingConnectionPool):
    """A sentinel-managed pool that waits for a free connection when all
    ``max_connections`` are in use (as the single-server client's pool
    does) instead of raising."""


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
    manager = Sentinel([], min_other_sentinels=0)
    # Each sentinel with the credentials of its own URL.
    manager.sentinels = [
        aioredis.Redis(host=h, port=p, protocol=2, socket_timeout=RESPONSE_TIMEOUT,
                       socket_connect_timeout=RESPONSE_TIMEOUT, **opts)
        for h, p, opts in nodes
    ]
    primary: Any = dict(username=username, password=password, db=db, protocol=2,
                        socket_connect_timeout=RESPONSE_TIMEOUT)
    commands = _BlockingSentinelPool(master_name, manager, max_connections=POOL_SIZE,
                                     timeout=None, socket_timeout=RESPONSE_TIMEOUT, **primary)
    pubsub = SentinelConnectionPool(master_name, manager, **primary)
    client = Client(None, prefix, _redis=aioredis.Redis(connection_pool=commands),
                    _hub=lambda orphan: Hub(None, orphan, pool=pubsub))

    async def close_sentinels() -> None:  # (Sentinel.aclose is newer than redis-py 5.0)
        for r in manager.sentinels:
            await r.aclose()
    client._on_close.append(close_sentinels)
    try:
        # Bounded: the sentinels may name no reachable primary (mid-failover).
        ping = asyncio.ensure_future(client._redis.ping())
        done, _ = await asyncio.wait({ping}, timeout=CONNECT_WAIT)
        if not done:
            ping.cancel()
            raise RedisError(f"no primary for {master_name!r} answered within "
                             f"{CONNECT_WAIT} s (sentinels: {', '.join(sentinels)})")
        ping.result()
    except BaseException as e:
        await client._redis.aclose()
        await close_sentinels()
        if isinstance(e, rexc.RedisError):
            raise _map_error(e) from e
        raise
    return client
