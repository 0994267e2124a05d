"""Sentinel under faults the failover tests do not cover: a client closed
in the middle of following a failover, a failover announced while one of
the client's sentinels is frozen, and an attempt refused by a dead primary."""

import asyncio
import os
import signal
import time

import pytest
import redis.asyncio as aioredis
from redis import exceptions as redis_errors

import redbell

from conftest import REPO, eventually, unique
from test_sentinel import _failover, _on_old_until_moved, _sentinels_name
from topology import Monitor, Proxy, SentinelTopology


async def test_aclose_while_following_a_failover_leaves_no_task_running():
    """``aclose()`` called from the move itself (the follower has just
    switched; the mux, the hub and the pool are being dropped), with a hold
    being renewed and a waiter parked: once it returns, and a moment later,
    no task of the client is left on the loop."""
    topo = SentinelTopology()  # its own: this test moves the primary
    before = asyncio.all_tasks()
    name = unique("sentinel-close")
    c = await redbell.connect_sentinel(topo.sentinel_urls, topo.MASTER)
    closing: list = []
    try:
        g = await c.mutex(name, lease=3.0).lock()
        waiter = asyncio.ensure_future(c.mutex(name).lock())
        await asyncio.sleep(0.5)
        assert not waiter.done()
        follower = c._on_close[0].__self__
        follower.on_move.append(lambda: closing.append(asyncio.ensure_future(c.aclose())))
        await _failover(topo, 0)
        for _ in range(100):
            if closing:
                break
            await asyncio.sleep(0.1)
        assert closing, "the client never moved to the new primary"
        done, _ = await asyncio.wait(closing, timeout=20)
        assert done, "aclose did not end within 20 s"
        closing[0].result()
        waiter.cancel()
        await asyncio.gather(waiter, return_exceptions=True)
        await asyncio.sleep(1.0)  # anything spawned late by the move
        left = [t for t in asyncio.all_tasks() - before if t is not asyncio.current_task()]
        assert not left, f"tasks left running after aclose: {left}"
        assert g.fence > 0
    finally:
        if not closing:
            await c.aclose()
        topo.stop()


@pytest.mark.parametrize("frozen", [(2,), (1, 2)], ids=["one-of-three", "two-of-three"])
async def test_a_frozen_sentinel_does_not_keep_the_client_on_the_old_primary(frozen):
    """One (or two) of three sentinels are SIGSTOPped (they neither answer
    nor hear of the failover); ``SENTINEL FAILOVER`` through sentinel 0,
    which announces it. The client hears that announcement: within 1 s of
    that sentinel naming the new primary, its locks must land there (as
    they do, at once, with no sentinel frozen). A look used to wait for
    every sentinel, the frozen one for the 2 s timeout, and about 20 locks
    were granted on the old primary meanwhile."""
    topo = SentinelTopology()
    pids = []
    for i in frozen:
        with open(os.path.join(REPO, "target", "redis-sentinel", str(topo.base),
                               f"sentinel-{i}.pid")) as f:
            pids.append(int(f.read().strip()))
    name = unique("sentinel-frozen")
    c = await redbell.connect_sentinel(topo.sentinel_urls, topo.MASTER)
    try:
        g = await c.mutex(name).lock()
        await g.unlock()
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        s = aioredis.Redis.from_url(topo.sentinel_urls[0])
        assert await s.execute_command("SENTINEL", "FAILOVER", topo.MASTER)
        await s.aclose()

        async def switched() -> bool:
            r = aioredis.Redis.from_url(topo.sentinel_urls[0])
            try:
                addr = await r.execute_command("SENTINEL", "get-master-addr-by-name",
                                               topo.MASTER)
            finally:
                await r.aclose()
            return addr is not None and int(addr[1]) == topo.replica_port
        assert await eventually(switched, 20, 0.05), "the failover did not happen"
        on_old = await _on_old_until_moved(c, topo, name, time.monotonic(), 1.0)
        print(f"{on_old} locks on the old primary with sentinels {frozen} frozen")
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)
        await c.aclose()
        topo.stop()


async def test_an_attempt_refused_by_a_dead_primary_leaves_no_release_behind():
    """The client's one sentinel is unreachable (behind a cut proxy) while
    the primary is SIGKILLed and the replica promoted, so the client still
    connects to the dead primary: a ``try_lock`` there is refused at
    connect (it never left the process) and fails. The sentinel is
    reachable again at once; the client moves to the new primary, which
    must run nothing for that lock: no release of a token nothing can
    hold. (The Rust client's ``sentinel.rs`` checks this for a parked
    waiter; a Python one never meets the dead primary: its park ends in a
    wait for its resubscription, which waits for the new primary.)

    Before: the release was queued as for an attempt of unknown outcome;
    sent after the client had moved, it ran on the new primary."""
    topo = SentinelTopology()
    proxy = Proxy(topo.base + 10)
    await proxy.start()
    client = None
    monitor = Monitor(topo.replica_port)
    name = unique("refused")
    try:
        client = await redbell.connect_sentinel([f"redis://127.0.0.1:{proxy.port}"],
                                                topo.MASTER)
        warm = await client.mutex(name + "-warm").lock()
        await warm.unlock()
        primary = aioredis.Redis.from_url(topo.url(topo.primary_port))
        assert await primary.execute_command("WAIT", 1, 5000) == 1, "replica behind"
        await primary.aclose()
        await proxy.cut()
        topo.kill(topo.primary_port)
        new = aioredis.Redis.from_url(topo.url(topo.replica_port))

        async def promoted() -> bool:
            try:  # (the promotion kills this connection)
                if (await new.role())[0] != b"master":
                    return False
            except redis_errors.RedisError:
                return False
            return await _sentinels_name(topo, topo.replica_port)
        assert await eventually(promoted, 30, 0.1), "no failover within 30 s"
        await new.aclose()
        # (The sentinels kill the clients of the node they promote: watch
        # it from then on.)
        await monitor.start()
        with pytest.raises(redbell.RedisError, match="(?i)Error 111 |refused") as refused:
            await client.mutex(name).try_lock()
        await proxy.start()  # before anything queued by the failure runs

        async def works() -> bool:
            try:
                probe = await client.mutex(unique("probe")).try_lock()
            except redbell.RedisError:
                return False
            await probe.unlock()
            return True
        assert await eventually(works, 20, 0.1), "the client never reached the new primary"
        # Waits for the background work (a release queued, had there been one).
        closing = asyncio.ensure_future(client.aclose())
        done, _ = await asyncio.wait({closing}, timeout=20)
        assert done, "aclose did not end within 20 s"
        client = None
        closing.result()
        await monitor.sync()
        ran = monitor.naming(f"{{{name}}}")
        assert not ran, (f"the new primary ran {len(ran)} commands for an attempt refused "
                         f"at connect ({refused.value}): {ran}")
    finally:
        if client is not None:
            await client.aclose()
        await monitor.stop()
        await proxy.cut()
        topo.stop()
