"""Sentinel under faults the failover tests do not cover: a client closed
in the middle of following a failover, and a failover announced while one
of the client's sentinels is frozen."""

import asyncio
import os
import signal
import time

import pytest
import redis.asyncio as aioredis

import redbell

from conftest import REPO, eventually, unique
from test_sentinel import _failover, _on_old_until_moved
from topology import SentinelTopology


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
