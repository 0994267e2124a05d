"""Sentinel: ``redbell.connect_sentinel`` on a real topology of
``scripts/redis/sentinel.sh`` (primary, replica, three sentinels), and a
failover (the primary SIGKILLed) that parked waiters sit through and are
served after, on the new primary."""

import asyncio
import time

import pytest
import redis.asyncio as aioredis
from redis import exceptions as redis_errors

import redbell
from redbell import sync

from conftest import eventually, unique
from topology import Proxy, SentinelTopology, lock_retrying


@pytest.fixture(scope="module")
def topo():
    t = SentinelTopology()
    yield t
    t.stop()


async def _connect(topo) -> redbell.Client:
    return await redbell.connect_sentinel(topo.sentinel_urls, topo.MASTER)


async def test_locks_and_wakeups_through_the_sentinels(topo):
    name = unique("sentinel")
    a, b = await _connect(topo), await _connect(topo)
    try:
        g = await a.mutex(name).lock()
        waiter = asyncio.ensure_future(b.mutex(name).lock())
        await asyncio.sleep(0.3)
        assert not waiter.done()
        await g.unlock()
        g2 = await asyncio.wait_for(waiter, 5)  # lease 30 s: a lost wake-up would time out
        assert g2.fence > g.fence
        await g2.unlock()
        # The keys are on the primary the sentinels name.
        raw = aioredis.Redis.from_url(topo.url(topo.primary_port))
        assert await raw.exists(f"redbell:{{{name}}}:fence") == 1
        await raw.aclose()
    finally:
        await a.aclose()
        await b.aclose()


async def test_bad_sentinels_are_a_typed_error(topo):
    with pytest.raises(redbell.RedisError):
        await redbell.connect_sentinel(["not a url"], topo.MASTER)
    with pytest.raises(redbell.RedisError):
        await redbell.connect_sentinel(topo.sentinel_urls, "no-such-master")
    with pytest.raises(redbell.RedisError):
        await redbell.connect_sentinel([], topo.MASTER)


def test_the_sync_face_connects_through_the_sentinels(topo):
    with sync.connect_sentinel(topo.sentinel_urls, topo.MASTER) as c:
        with c.mutex(unique("sentinel-sync")) as g:
            assert g.fence > 0


async def _sentinels_name(topo, port: int) -> bool:
    """Whether every sentinel names 127.0.0.1:``port`` as the primary."""
    for url in topo.sentinel_urls:
        s = aioredis.Redis.from_url(url)
        try:
            addr = await s.execute_command("SENTINEL", "get-master-addr-by-name", topo.MASTER)
        except redis_errors.RedisError:
            return False
        finally:
            await s.aclose()
        if addr is None or int(addr[1]) != port:
            return False
    return True


async def _on_old_until_moved(client, topo, name: str, since: float, limit: float) -> int:
    """After a failover to the topology's replica: locks a fresh name every
    0.1 s until one lands on the new primary, and then 20 more, which must
    all land there too; how many landed on the old primary first. Fails when
    they still land there ``limit`` s after ``since``."""
    old = aioredis.Redis.from_url(topo.url(topo.primary_port))
    new = aioredis.Redis.from_url(topo.url(topo.replica_port))
    on_old, on_new, i = 0, 0, 0
    try:
        while on_new < 20:
            i += 1
            probe = f"{name}-{i}"
            p = await client.mutex(probe).lock()
            there = await new.get(f"redbell:{{{probe}}}") == p.token.encode()
            stale = await old.get(f"redbell:{{{probe}}}") == p.token.encode()
            await p.unlock()
            assert there or stale, "the lock is on neither server"
            if there:
                on_new += 1
                continue
            assert on_new == 0, f"lock {i} on the old primary after {on_new} on the new one"
            on_old += 1
            assert time.monotonic() - since < limit, \
                f"{on_old} locks granted on the old primary in the {limit} s after the failover"
            await asyncio.sleep(0.1)
        return on_old
    finally:
        await old.aclose()
        await new.aclose()


async def _failover(topo, via: int) -> None:
    """``SENTINEL FAILOVER`` through sentinel ``via``; returns once every
    sentinel names the replica, with the old primary still up as a primary."""
    s = aioredis.Redis.from_url(topo.sentinel_urls[via])
    assert await s.execute_command("SENTINEL", "FAILOVER", topo.MASTER)
    await s.aclose()
    assert await eventually(lambda: _sentinels_name(topo, topo.replica_port), 20, 0.05), \
        "the sentinels did not agree on the new primary within 20 s"
    old = aioredis.Redis.from_url(topo.url(topo.primary_port))
    assert (await old.role())[0] == b"master", "the old primary was converted already"
    await old.aclose()


async def test_the_client_moves_when_a_sentinel_announces_a_new_primary():
    """``SENTINEL FAILOVER`` leaves the old primary up and answering as a
    primary until the sentinels convert it, 8 s or more later. A client that
    only asks the sentinels when a connection fails stays on it and grants
    locks the new primary never hears of (the soak's Python overlaps). The
    client follows the sentinels' ``+switch-master`` instead: parked waiters
    are served on the new primary, and once a lock lands there, none lands
    on the old one again."""
    topo = SentinelTopology()  # its own: this test moves the primary
    name = unique("announced")
    holder, wa, wb = (await _connect(topo), await _connect(topo), await _connect(topo))
    old = aioredis.Redis.from_url(topo.url(topo.primary_port))
    new = aioredis.Redis.from_url(topo.url(topo.replica_port))
    key = f"redbell:{{{name}}}"
    placed: list = []
    waiters: list = []

    async def wait_and_check(c):
        # Where the waiter's lock is while it holds it.
        g = await c.mutex(name).lock()
        placed.append((await old.get(key) == g.token.encode(),
                       await new.get(key) == g.token.encode()))
        await g.unlock()
    try:
        g = await holder.mutex(name, lease=60).lock()
        waiters = [asyncio.ensure_future(wait_and_check(c)) for c in (wa, wb)]

        async def subscribed(r):
            return len(await r.pubsub_channels(f"{key}:wake:*")) == 2
        assert await eventually(lambda: subscribed(old), 10), "waiters never subscribed"
        assert await old.execute_command("WAIT", 1, 5000) == 1, "replica behind"

        await _failover(topo, 0)
        agreed = time.monotonic()

        # Parked waiters: resubscribed on the new primary, served there.
        assert await eventually(lambda: subscribed(new), 5), \
            "the waiters never resubscribed on the new primary"
        await g.unlock()
        done, _ = await asyncio.wait(waiters, timeout=20)
        assert len(done) == 2, "waiters not served within 20 s of the release"
        for w in waiters:
            w.result()
        assert placed == [(False, True)] * 2, \
            f"waiters' locks (on old, on new): {placed}"

        # Fresh locks: on the new primary within 3 s of the agreement, and
        # never on the old one after that.
        on_old = await _on_old_until_moved(holder, topo, name, agreed, 3)
        print(f"{on_old} locks on the old primary after the sentinels agreed")
    finally:
        for w in waiters:
            w.cancel()
        for c in (holder, wa, wb):
            await c.aclose()
        await old.aclose()
        await new.aclose()
        topo.stop()


async def test_a_client_that_missed_the_announcement_moves_once_it_hears_a_sentinel():
    """The client's one sentinel is unreachable (behind a proxy that is cut)
    while the failover happens, and reachable again once the sentinels agree:
    the announcement was missed, so the subscription made again must be
    followed by a look at the primary, or the client stays on the old one
    until the sentinels convert it."""
    topo = SentinelTopology()
    proxy = Proxy(topo.base + 10)
    await proxy.start()
    client = None
    try:
        client = await redbell.connect_sentinel([f"redis://127.0.0.1:{proxy.port}"],
                                                topo.MASTER)
        name = unique("missed")
        g = await client.mutex(name).lock()
        await g.unlock()
        await proxy.cut()  # its subscription dropped, and no new connection
        await _failover(topo, 1)
        await proxy.start()  # reachable again, on the same port
        back = time.monotonic()
        on_old = await _on_old_until_moved(client, topo, name, back, 5)
        print(f"{on_old} locks on the old primary after the sentinel was back")
    finally:
        if client is not None:
            await client.aclose()
        await proxy.cut()
        topo.stop()


async def test_parked_waiters_are_served_after_the_primary_is_killed(topo):
    """Runs last in this module: it leaves the topology failed over."""
    name = unique("sentinel-failover")
    holder = await _connect(topo)
    wa, wb = await _connect(topo), await _connect(topo)
    primary = aioredis.Redis.from_url(topo.url(topo.primary_port))
    replica = aioredis.Redis.from_url(topo.url(topo.replica_port))
    errors: list = []
    try:
        g = await holder.mutex(name, lease=60).lock()
        waiters = [asyncio.ensure_future(lock_retrying(c, name, errors))
                   for c in (wa, wa, wb)]

        async def subscribed(r):
            return len(await r.pubsub_channels(f"redbell:{{{name}}}:wake:*")) == 2
        assert await eventually(lambda: subscribed(primary), 10), "waiters never subscribed"
        await asyncio.sleep(0.2)
        await primary.set(f"redbell-test:{{{name}}}:sync", 1)
        assert await primary.execute_command("WAIT", 1, 5000) == 1, "replica behind"

        killed = time.monotonic()
        topo.kill(topo.primary_port)

        async def switched():
            try:
                return (await replica.role())[0] == b"master"
            except redis_errors.RedisError:
                return False
        assert await eventually(switched, 30), "no failover within 30 s"
        failover = time.monotonic() - killed

        # The holder's client works again on the new primary.
        async def works():
            try:
                probe = await holder.mutex(unique("probe")).try_lock()
                await probe.unlock()
                return True
            except redbell.RedisError:
                return False
        assert await eventually(works, 15, 0.1), "the client never reached the new primary"
        working = time.monotonic() - killed
        assert await replica.get(f"redbell:{{{name}}}") == g.token.encode(), \
            "the replicated lock did not survive the failover"
        assert not any(w.done() for w in waiters), "a waiter finished while the lock was held"
        # The waiters' subscriptions moved to the new primary.
        assert await eventually(lambda: subscribed(replica), 15), \
            "the waiters never resubscribed on the new primary"
        assert not g.is_lost
        released = time.monotonic()
        await g.unlock()
        done, _ = await asyncio.wait(waiters, timeout=20)
        assert len(done) == 3, f"{3 - len(done)} waiters not served within 20 s of the release"
        got = [w.result() - released for w in waiters]
        print(f"failover {failover:.1f} s after the kill; client working {working:.1f} s; "
              f"waiters served {min(got) * 1000:.0f} .. {max(got) * 1000:.0f} ms after the release; "
              f"{len(errors)} retried errors: {errors[:3]}")
        assert max(got) < 10, f"waiters served {got} s after the release"
    finally:
        for c in (holder, wa, wb):
            await c.aclose()
        await primary.aclose()
        await replica.aclose()
