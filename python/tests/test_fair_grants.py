"""FairMutex grants that name a waiter its client no longer has.

After a Sentinel failover that lost the queue's last changes, the promoted
replica still queues members that were served on the old primary; their
clients are still subscribed, so each gets a grant. Here the replica's
queue is made by hand on one server: members of gone waiters put ahead of
live ones (``tests/sentinel_fair.rs`` makes it with a real failover).
"""

import asyncio
import time
import uuid

import redbell

from conftest import redis_url, unique

STALE = 4


async def test_grants_to_gone_waiters_are_passed_on(raw):
    """Four clients each wait for the lock, behind a member of a waiter of
    theirs that is gone: the holder's release must reach a live waiter at
    once, not after one claim (500 ms) per gone member.

    Before (such a grant was ignored): about 2 s."""
    name = unique("fair-stale")
    fifo = f"redbell:{{{name}}}:fifo"
    holder = await redbell.connect(redis_url())
    clients = [await redbell.connect(redis_url()) for _ in range(STALE)]
    try:
        g = await holder.fair_mutex(name).lock()

        async def take(c: redbell.Client) -> float:
            got = await c.fair_mutex(name).lock()
            at = time.monotonic()
            await got.unlock()
            return at

        waiters = [asyncio.ensure_future(take(c)) for c in clients]
        end = time.monotonic() + 5
        while await raw.zcount(fifo, 0, "+inf") < STALE:
            assert time.monotonic() < end, "the waiters did not queue"
            await asyncio.sleep(0.01)
        first = min(score for _, score in await raw.zrangebyscore(fifo, 0, "+inf", withscores=True))
        # Waiter ids far above any the clients drew: waiters they do not have.
        for i, c in enumerate(clients):
            member = f"{c.id}:{9000 + i}:q{uuid.uuid4().hex}"
            await raw.zadd(fifo, {member: first - STALE + i})
        released = time.monotonic()
        await g.unlock()
        took = min(await asyncio.wait_for(asyncio.gather(*waiters), 30)) - released
        assert took < 1.0, (
            f"the first live waiter got the lock {took:.3f} s after the release: the grants to "
            f"the {STALE} gone waiters lapsed one claim at a time")
    finally:
        for c in [holder, *clients]:
            await c.aclose()


async def test_a_late_grant_does_not_release_the_lock_its_waiter_holds(raw):
    """The grant message for a waiter that already holds the lock (its
    attempt found the grant first) arrives late: the client must not pass
    it on, which would release a lock in use."""
    name = unique("fair-late")
    fifo = f"redbell:{{{name}}}:fifo"
    holder, a, b = [await redbell.connect(redis_url()) for _ in range(3)]
    try:
        g = await holder.fair_mutex(name).lock()
        a_task = asyncio.ensure_future(a.fair_mutex(name).lock())
        end = time.monotonic() + 5
        while await raw.zcount(fifo, 0, "+inf") < 1:
            assert time.monotonic() < end, "A did not queue"
            await asyncio.sleep(0.01)
        b_task = asyncio.ensure_future(b.fair_mutex(name).lock())
        while await raw.zcount(fifo, 0, "+inf") < 2:
            assert time.monotonic() < end, "B did not queue"
            await asyncio.sleep(0.01)
        member = (await raw.zrangebyscore(fifo, 0, "+inf"))[0].decode()
        a_id, wid, token = member.split(":")
        await g.unlock()
        ga = await asyncio.wait_for(a_task, 5)
        assert ga.token == token
        receivers = await raw.publish(f"redbell:{{{name}}}:wake:{a_id}", f"{wid}:{token}:g1:1")
        assert receivers == 1
        await asyncio.sleep(0.3)
        assert await raw.get(f"redbell:{{{name}}}") == token.encode(), \
            "a late grant message released the lock its waiter holds"
        assert not b_task.done(), "B got the lock beside A"
        await ga.unlock()
        await (await asyncio.wait_for(b_task, 5)).unlock()
    finally:
        for c in (holder, a, b):
            await c.aclose()
