"""Redis Cluster: the slot of parked waiters' channels moves to another
primary (``CLUSTER SETSLOT``, the keys ``MIGRATE``d) while their
subscriptions stand, or while the hub's ``SSUBSCRIBE`` of them is in
flight. No wake-up may be lost: the channels are subscribed again on the
slot's new primary, and a release there reaches every waiter at once, not
when its park (the holder's 30 s lease) runs out (the Rust client's
``cluster_dropped.rs``).

Each test starts a cluster of its own: it moves a slot."""

import asyncio
import time

import pytest
import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster
from redis.crc import key_slot

import redbell

from conftest import eventually, unique
from topology import ClusterTopology

MOVED = 20
"""Locks in the slot that moves."""


def _in_slot(prefix: str, slot: int, n: int):
    """``n`` lock names whose keys hash to ``slot``."""
    names, i = [], 0
    while len(names) < n:
        name = f"{prefix}-{i}"
        if key_slot(f"redbell:{{{name}}}".encode()) == slot:
            names.append(name)
        i += 1
    return names


async def _owners(raw: RedisCluster):
    """Each slot's primary (by port), and the three primaries: P1 owns
    slot 0."""
    await raw.initialize()
    owner = {s: raw.nodes_manager.slots_cache[s][0].port for s in range(16384)}
    p1 = owner[0]
    p3 = next(p for p in owner.values() if p != p1)
    p2 = next(p for p in owner.values() if p not in (p1, p3))
    return owner, (p1, p2, p3)


async def _tear_down(tasks, clients, raw, topo: ClusterTopology) -> None:
    """Cancel ``tasks``, close ``clients`` and ``raw`` (those not None),
    stop the cluster."""
    for t in tasks:
        t.cancel()
    for c in clients:
        if c is not None:
            await c.aclose()
    if raw is not None:
        await raw.aclose()
    topo.stop()


async def _shard_channels(port: int, pattern: str) -> int:
    r = aioredis.Redis(host="127.0.0.1", port=port, protocol=2)
    try:
        return len(await r.execute_command("PUBSUB", "SHARDCHANNELS", pattern))
    finally:
        await r.aclose()


async def _node_id(port: int) -> str:
    r = aioredis.Redis(host="127.0.0.1", port=port, protocol=2, decode_responses=True)
    try:
        return await r.execute_command("CLUSTER", "MYID")
    finally:
        await r.aclose()


async def _setslot(port: int, slot: int, what: str, node: str) -> None:
    r = aioredis.Redis(host="127.0.0.1", port=port, protocol=2)
    try:
        await r.execute_command("CLUSTER", "SETSLOT", slot, what, node)
    finally:
        await r.aclose()


async def _lock(client, name: str):
    """``lock()``, called again after a RedisError (an attempt that met a
    paused node fails after the response timeout; the caller retries)."""
    while True:
        try:
            return await client.mutex(name).lock()
        except redbell.RedisError:
            await asyncio.sleep(0.1)


@pytest.mark.parametrize("when", ["subscribed", "subscribing", "joining"])
async def test_a_slot_moved_under_parked_waiters_loses_no_wakeup(when):
    """S, P1's first slot, holds ``MOVED`` locks held by one client, each
    with a waiter of another client, parked and subscribed on P1; that
    client also waits for a lock on P3, so its connection to P3 is live. S
    then moves to P3:

    - ``subscribed``: at once; P1 drops the subscriptions with
      ``sunsubscribe`` pushes;
    - ``subscribing``: P1 is paused (``CLIENT PAUSE 5000 ALL``) first. The
      hub's probe fails and it connects again to resubscribe; the move,
      queued on P1 before that, runs first when P1 resumes, so the
      ``SSUBSCRIBE``s in flight are answered ``MOVED``;
    - ``joining``: as ``subscribing``, but each lock has a second waiter
      in that client, which waits for a lock in another slot of P1 and for
      nothing on P3 (the channels move to a node it has no connection to
      yet). Once the hub has dropped its connection to the paused P1, the
      first waiters leave: the second ones take their place and wait for
      the subscription, in flight when the slot moves. P3 is paused for
      4 s right after the move: the second waiters, told that their
      channels moved, wait for P3 while the hub's connection to P1 is back.

    Afterwards P3 must hold the ``MOVED`` subscriptions, and once the holder
    releases the locks every waiter must have its lock within 5 s."""
    topo = ClusterTopology()
    holder = waiting = raw = None
    waiters: list = []
    leaving: list = []
    waiter_p3 = asyncio.get_running_loop().create_future()
    try:
        raw = RedisCluster.from_url(topo.urls[0])
        owner, (p1, p2, p3) = await _owners(raw)
        slot = 0
        prefix = unique(f"dropped-{when}")
        names = _in_slot(prefix, slot, MOVED)
        other = unique("dropped-other")
        on_p3, on_p1 = (next(n for n in (f"{other}-{i}" for i in range(1, 1000))
                             if owner[key_slot(f"redbell:{{{n}}}".encode())] == p
                             and key_slot(f"redbell:{{{n}}}".encode()) != slot)
                        for p in (p3, p1))
        pattern = f"redbell:{{{prefix}-*"
        id1, id3 = await _node_id(p1), await _node_id(p3)

        holder = await redbell.connect_cluster(topo.urls)
        waiting = await redbell.connect_cluster(topo.urls)
        held = [await holder.mutex(n).lock() for n in names]
        held_p3 = await holder.mutex(on_p3).lock()
        held_p1 = await holder.mutex(on_p1).lock()
        joining = when == "joining"
        # The other waiter: on P3 (its connection live), or on P1.
        waiter_p3 = asyncio.ensure_future(_lock(waiting, on_p1 if joining else on_p3))
        waiters = [asyncio.ensure_future(_lock(waiting, n)) for n in names]

        async def parked() -> bool:
            return await _shard_channels(p1, pattern) == MOVED \
                and await _shard_channels(p1 if joining else p3,
                                          f"redbell:{{{on_p1 if joining else on_p3}}}:*") == 1
        assert await eventually(parked, 10, 0.05), "the waiters did not all subscribe"
        hub = next(h for h in waiting._hub._hubs.values() if h._channels)
        if joining:
            leaving, waiters = waiters, [asyncio.ensure_future(_lock(waiting, n))
                                         for n in names]

            async def second() -> bool:
                return all(len(ch.waiters) == 2 for name, ch in hub._channels.items()
                           if name.startswith(pattern[:-1].encode()))
            assert await eventually(second, 10, 0.05), "the second waiters did not park"

        # The move of S from P1 to P3, as redis-cli --cluster reshard does it.
        a1 = aioredis.Redis(host="127.0.0.1", port=p1, protocol=2, socket_timeout=30)
        keys = await a1.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 1000)
        assert keys, "no key in S"
        await _setslot(p3, slot, "IMPORTING", id1)
        move = a1.pipeline(transaction=False)
        move.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", id3)
        move.execute_command("MIGRATE", "127.0.0.1", p3, "", 0, 5000, "KEYS", *keys)
        move.execute_command("CLUSTER", "SETSLOT", slot, "NODE", id3)
        if when != "subscribed":
            r = aioredis.Redis(host="127.0.0.1", port=p1, protocol=2)
            await a1.ping()  # connected before the pause: its commands queue first
            await r.execute_command("CLIENT", "PAUSE", 5000, "ALL")
            await r.aclose()
        moving = asyncio.ensure_future(move.execute())
        if joining:
            async def dropped() -> bool:
                return hub._conn is None
            assert await eventually(dropped, 4, 0.01), "the hub kept its connection to P1"
            for w in leaving:
                w.cancel()
            await asyncio.gather(*leaving, return_exceptions=True)
        await moving
        await a1.aclose()
        for p in (p3, p2):
            await _setslot(p, slot, "NODE", id3)
        if joining:
            r = aioredis.Redis(host="127.0.0.1", port=p3, protocol=2)
            await r.execute_command("CLIENT", "PAUSE", 4000, "ALL")
            await r.aclose()
        if when != "subscribed":
            stats = aioredis.Redis(host="127.0.0.1", port=p1, protocol=2)
            info = await stats.info("commandstats")
            await stats.aclose()
            refused = info.get("cmdstat_ssubscribe", {}).get("rejected_calls", 0)
            print(f"SSUBSCRIBEs answered MOVED on P1 after the move: {refused}")
            assert refused >= MOVED, \
                "the hub's SSUBSCRIBEs were not in flight at the move: the test proved nothing"

        async def moved() -> bool:
            return await _shard_channels(p3, pattern) == MOVED
        subscribed = await eventually(moved, 10, 0.05)
        there = await _shard_channels(p3, pattern)
        assert not any(w.done() for w in waiters), "a waiter finished while its lock was held"
        released = time.monotonic()
        for g in held:
            await g.unlock()
        done, late = await asyncio.wait(waiters, timeout=max(0.1, released + 5 - time.monotonic()))
        print(f"{there} of S's {MOVED} channels subscribed on P3 after the move; "
              f"{len(late)} waiters without their lock 5 s after the release")
        assert not late, f"{len(late)} of S's {MOVED} waiters missed their wake-up"
        assert subscribed, f"only {there} of S's {MOVED} channels subscribed on P3"
        for w in done:
            await w.result().unlock()
        await (held_p1 if joining else held_p3).unlock()
        await (await asyncio.wait_for(waiter_p3, 5)).unlock()
    finally:
        await _tear_down(waiters + leaving + [waiter_p3], (holder, waiting), raw, topo)


async def test_a_waiter_joining_a_moved_lock_keeps_its_own_place():
    """A waiter of one client parks on a lock of S, subscribed on P1; S
    moves to P3 and the channel follows it into the hub of P3, new to the
    client. A second waiter of the same client then waits for that lock:
    it must not take the first one's waiter id (each node's hub counted
    from 1), which made both one member of the queue and dropped the first
    from the channel. The holder releases: one waiter gets the lock and
    releases it, and the other must have it within 5 s, not when its park
    (the holder's 30 s lease) runs out."""
    topo = ClusterTopology()
    holder = waiting = raw = None
    tasks: list = []
    try:
        raw = RedisCluster.from_url(topo.urls[0])
        _, (p1, p2, p3) = await _owners(raw)
        name = _in_slot(unique("dropped-ids"), 0, 1)[0]
        channels = f"redbell:{{{name}}}:*"
        id1, id3 = await _node_id(p1), await _node_id(p3)
        holder = await redbell.connect_cluster(topo.urls)
        waiting = await redbell.connect_cluster(topo.urls)
        held = await holder.mutex(name).lock()
        tasks.append(asyncio.ensure_future(_lock(waiting, name)))

        async def on(port: int) -> bool:
            return await _shard_channels(port, channels) == 1
        assert await eventually(lambda: on(p1), 10, 0.05), "the first waiter did not subscribe"
        a1 = aioredis.Redis(host="127.0.0.1", port=p1, protocol=2)
        keys = await a1.execute_command("CLUSTER", "GETKEYSINSLOT", 0, 1000)
        await _setslot(p3, 0, "IMPORTING", id1)
        await a1.execute_command("CLUSTER", "SETSLOT", 0, "MIGRATING", id3)
        await a1.execute_command("MIGRATE", "127.0.0.1", p3, "", 0, 5000, "KEYS", *keys)
        await a1.aclose()
        for p in (p3, p1, p2):
            await _setslot(p, 0, "NODE", id3)
        assert await eventually(lambda: on(p3), 10, 0.05), "the channel did not move to P3"
        tasks.append(asyncio.ensure_future(_lock(waiting, name)))
        hub = next(h for h in waiting._hub._hubs.values() if h._channels)

        async def both() -> bool:
            return sum(len(ch.waiters) for ch in hub._channels.values()) == 2
        parked = await eventually(both, 10, 0.05)
        assert not any(t.done() for t in tasks), "a waiter finished while the lock was held"
        await held.unlock()
        first = await asyncio.wait_for(asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED),
                                       10)
        released = time.monotonic()
        await next(iter(first[0])).result().unlock()
        done, late = await asyncio.wait(tasks, timeout=max(0.1, released + 5 - time.monotonic()))
        assert not late, "the second waiter of the lock was not served within 5 s"
        assert parked, "the second waiter was not registered beside the first"
        for t in done:
            g = t.result()
            if g is not None and not g._done:
                await g.unlock()
    finally:
        await _tear_down(tasks, (holder, waiting), raw, topo)
