"""Sentinel under faults the failover tests do not cover: a client closed
in the middle of following a failover."""

import asyncio

import redbell

from conftest import unique
from test_sentinel import _failover
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
