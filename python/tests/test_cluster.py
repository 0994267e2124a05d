"""Redis Cluster: ``redbell.connect_cluster`` on a real cluster of
``scripts/redis/cluster.sh`` (three primaries, one replica each): locks
on names in every shard, wake-ups by sharded pub/sub (SSUBSCRIBE on the
slot's primary), renewals batched per slot, and a primary killed under
parked waiters."""

import asyncio
import os
import signal
import time

import pytest
import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster

import redbell
from redbell import sync

from conftest import REPO, eventually, unique
from topology import ClusterTopology, lock_retrying


@pytest.fixture(scope="module")
def topo():
    t = ClusterTopology()
    yield t
    t.stop()


def _names(tag: str, n: int = 9):
    return [unique(f"{tag}{i}") for i in range(n)]


async def test_waiters_in_every_shard_are_woken_by_sharded_pubsub(topo):
    a = await redbell.connect_cluster(topo.urls)
    b = await redbell.connect_cluster(topo.urls[2:])
    raw = RedisCluster.from_url(topo.urls[0])
    await raw.initialize()
    try:
        names = _names("cl")
        slots = {raw.keyslot(f"redbell:{{{n}}}") for n in names}
        nodes = {raw.get_node_from_key(f"redbell:{{{n}}}").name for n in names}
        assert len(nodes) >= 2, f"names landed on one node only: {nodes}"
        held = [await a.mutex(n).lock() for n in names]
        waiters = [asyncio.ensure_future(b.mutex(n).lock()) for n in names]
        await asyncio.sleep(0.5)
        assert not any(w.done() for w in waiters)
        # Each waiter listens on its slot's primary, with SSUBSCRIBE.
        for n in names:
            node = raw.get_node_from_key(f"redbell:{{{n}}}")
            r = aioredis.Redis(host=node.host, port=node.port)
            chans = await r.execute_command("PUBSUB", "SHARDCHANNELS", f"redbell:{{{n}}}:wake:*")
            await r.aclose()
            assert chans == [f"redbell:{{{n}}}:wake:{b.id}".encode()], (n, chans)
        for g in held:
            await g.unlock()
        got = await asyncio.wait_for(asyncio.gather(*waiters), 5)  # lease 30 s
        for g, h in zip(got, held):
            assert g.fence > h.fence
            await g.unlock()
        print(f"{len(names)} names over {len(slots)} slots on {len(nodes)} primaries")
    finally:
        await a.aclose()
        await b.aclose()
        await raw.aclose()


async def test_fair_mutex_and_semaphore_on_the_cluster(topo):
    a = await redbell.connect_cluster(topo.urls)
    b = await redbell.connect_cluster(topo.urls)
    try:
        name = unique("clfair")
        g = await a.fair_mutex(name).lock()
        order = []

        async def wait(i, c):
            h = await c.fair_mutex(name).lock()
            order.append(i)
            await h.unlock()
        raw = RedisCluster.from_url(topo.urls[0])

        async def queued(n):
            members = await raw.zrange(f"redbell:{{{name}}}:fifo", 0, -1)
            return len([m for m in members if m != b"~"]) >= n
        ws = []
        for i, c in enumerate([b, a, b]):
            ws.append(asyncio.ensure_future(wait(i, c)))
            # Arrivals in order; the third waits in its client behind the
            # first (one queue place per client) and keeps its arrival.
            assert await eventually(lambda: queued(min(i + 1, 2)), 10)
            await asyncio.sleep(0.1)
        await raw.aclose()
        await g.unlock()
        await asyncio.wait_for(asyncio.gather(*ws), 10)
        assert order == [0, 1, 2]
        sem = unique("clsem")
        p1 = await a.semaphore(sem, 2).lock()
        p2 = await b.semaphore(sem, 2).lock()
        assert await a.semaphore(sem, 2).try_lock() is None
        w = asyncio.ensure_future(a.semaphore(sem, 2).lock())
        await asyncio.sleep(0.3)
        await p2.unlock()
        p3 = await asyncio.wait_for(w, 5)
        for p in (p1, p3):
            await p.unlock()
    finally:
        await a.aclose()
        await b.aclose()


async def test_renewals_span_slots(topo):
    """Holds in several slots with a short lease, renewed per slot: all
    stay held for three leases (one extend across slots would fail with
    CROSSSLOT and lose them all at the first renewal)."""
    c = await redbell.connect_cluster(topo.urls)
    try:
        held = [await c.mutex(n, lease=1.5).lock() for n in _names("clrenew")]
        await asyncio.sleep(4.5)
        assert not any(g.is_lost for g in held), [g.name for g in held if g.is_lost]
        for g in held:
            await g.unlock()
    finally:
        await c.aclose()


def test_the_sync_face_connects_to_the_cluster(topo):
    with sync.connect_cluster(topo.urls) as c:
        with c.mutex(unique("clsync")) as g:
            assert g.fence > 0


async def test_bad_nodes_are_a_typed_error(topo):
    with pytest.raises(redbell.RedisError):
        await redbell.connect_cluster(["not a url"])
    with pytest.raises(redbell.RedisError):
        await redbell.connect_cluster([])


async def test_parked_waiters_follow_their_slot_to_the_promoted_replica(topo):
    """Runs last in this module: it kills a primary. The holder's lock is
    replicated, the primary of its slot SIGKILLed; once the replica is
    promoted, the waiters' subscriptions have moved to it, and the release
    there wakes them."""
    name = unique("clfailover")
    key = f"redbell:{{{name}}}"
    holder = await redbell.connect_cluster(topo.urls)
    wa, wb = await redbell.connect_cluster(topo.urls), await redbell.connect_cluster(topo.urls)
    raw = RedisCluster.from_url(topo.urls[0])
    await raw.initialize()
    errors: list = []

    try:
        g = await holder.mutex(name, lease=60).lock()
        waiters = [asyncio.ensure_future(lock_retrying(c, name, errors)) for c in (wa, wa, wb)]
        node = raw.get_node_from_key(key)
        primary = aioredis.Redis(host=node.host, port=node.port)

        async def subscribed(r):
            return len(await r.execute_command("PUBSUB", "SHARDCHANNELS", f"{key}:wake:*")) == 2
        assert await eventually(lambda: subscribed(primary), 10), "waiters never subscribed"
        await asyncio.sleep(0.2)
        await primary.set(f"{key}:sync", 1)
        assert await primary.execute_command("WAIT", 1, 5000) == 1, "replica behind"
        await primary.aclose()

        killed = time.monotonic()
        with open(os.path.join(REPO, "target", "redis-cluster", str(topo.base),
                               f"{node.port}.pid")) as f:
            os.kill(int(f.read().strip()), signal.SIGKILL)

        async def promoted():
            try:
                await raw.nodes_manager.initialize()
                return raw.get_node_from_key(key).port != node.port
            except Exception:
                return False
        assert await eventually(promoted, 30, 0.5), "no replica promoted within 30 s"
        failover = time.monotonic() - killed
        new = raw.get_node_from_key(key)
        new_primary = aioredis.Redis(host=new.host, port=new.port)
        assert await new_primary.get(key) == g.token.encode(), "the lock was not replicated"
        assert await eventually(lambda: subscribed(new_primary), 15), \
            "the waiters' subscriptions never moved to the promoted replica"
        await new_primary.aclose()
        assert not any(w.done() for w in waiters), "a waiter finished while the lock was held"
        released = time.monotonic()
        await g.unlock()
        done, _ = await asyncio.wait(waiters, timeout=20)
        assert len(done) == 3, f"{3 - len(done)} waiters not served within 20 s of the release"
        got = [w.result() - released for w in waiters]
        print(f"cluster failover {failover:.1f} s after the kill; waiters served "
              f"{min(got) * 1000:.0f} .. {max(got) * 1000:.0f} ms after the release; "
              f"{len(errors)} retried errors: {errors[:3]}")
    finally:
        for c in (holder, wa, wb):
            await c.aclose()
        await raw.aclose()
