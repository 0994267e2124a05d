"""Cancel safety, as integration-tests/tests/cancel.rs checks it for Rust:
``asyncio.CancelledError`` at any point of an acquire leaves no lock and no
queue entry behind."""

import asyncio
import random

import pytest

import redbell

from conftest import eventually, redis_url, unique


async def _lock_keys(raw, prefix):
    out = {}
    for k in await raw.keys(f"redbell:{{{prefix}*"):
        if k.endswith(b"}") and await raw.type(k) == b"string":
            out[k.decode()] = (await raw.get(k) or b"").decode()
    return out


async def _queued(raw, prefix):
    n = 0
    for k in await raw.keys(f"redbell:{{{prefix}*"):
        if k.endswith((b":waiters", b":fifo", b":queue", b":holders")):
            n += await raw.zcard(k)
    return n


@pytest.mark.parametrize("kind", ["mutex", "fair", "semaphore"])
async def test_cancelled_lock_calls_leave_nothing_behind(raw, kind):
    prefix = unique(f"cancel-{kind}")
    names = [f"{prefix}-{i}" for i in range(8)]
    clients = [await redbell.connect(redis_url()) for _ in range(3)]

    def handle(c, n):
        if kind == "mutex":
            return c.mutex(n)
        if kind == "fair":
            return c.fair_mutex(n)
        return c.semaphore(n, 2)

    async def holder(c, n):
        for r in range(4):
            async with handle(c, n):  # released even when cancelled
                await asyncio.sleep(0.003 + r / 1000)

    try:
        holders = [asyncio.ensure_future(holder(clients[i % 3], n)) for i, n in enumerate(names)]
        rng = random.Random()

        async def one():
            c, n = rng.choice(clients), rng.choice(names)
            try:
                g = await asyncio.wait_for(handle(c, n).lock(), rng.uniform(0, 1.5))
            except asyncio.TimeoutError:
                return 0, None
            if rng.random() < 0.3:
                return 1, g
            await g.unlock()
            return 1, None

        results = await asyncio.wait_for(asyncio.gather(*[one() for _ in range(40)]), 60)
        kept = [g for _, g in results if g is not None]
        print(f"{kind}: {sum(a for a, _ in results)} of 40 acquired, {len(kept)} kept")
        await asyncio.sleep(0.3)
        for h in holders:
            h.cancel()
        await asyncio.gather(*holders, return_exceptions=True)
        if kind != "semaphore":
            want = {f"redbell:{{{g.name}}}": g.token for g in kept}
            assert len(want) == len(kept), "two live guards on one name"

            async def only_live():
                return await _lock_keys(raw, prefix) == want
            assert await eventually(only_live, 3), \
                f"lock keys {await _lock_keys(raw, prefix)} vs live guards {want}"
        for g in kept:
            await g.unlock()
        for c in clients:
            await c.aclose()  # finishes background releases and pass-ons

        async def empty():
            return await _lock_keys(raw, prefix) == {} and await _queued(raw, prefix) == 0
        assert await eventually(empty, 3), \
            f"left behind: {await _lock_keys(raw, prefix)}, {await _queued(raw, prefix)} queued"
    finally:
        for c in clients:
            if not c._closed:
                await c.aclose()


async def test_cancelled_waiter_passes_the_wakeup_on(client, raw):
    """Two local waiters; the queuer is cancelled as the release lands: the
    other still gets the lock at once (lease 30 s: a lost wake-up would show
    as a timeout)."""
    name = unique("passon")
    other = await redbell.connect(redis_url())
    try:
        g = await other.mutex(name).lock()
        first = asyncio.ensure_future(client.mutex(name).lock())
        await asyncio.sleep(0.2)
        second = asyncio.ensure_future(client.mutex(name).lock())
        await asyncio.sleep(0.2)
        await g.unlock()
        first.cancel()
        try:
            g1 = await first
            await g1.unlock()  # it won the race: fine, the second follows
        except asyncio.CancelledError:
            pass
        g2 = await asyncio.wait_for(second, 3)
        await g2.unlock()
    finally:
        await other.aclose()
