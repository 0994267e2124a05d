"""Python and Rust clients on one lock, on a real Redis: wake-ups both
ways, fences, FIFO, shared permits, a killed and a frozen Python process.

The Rust side is the ``redbell`` CLI (``redbell run``, which puts the fence
in ``$REDBELL_FENCE``) and ``sem_worker`` of integration-tests. Delays are
measured on the server's clock: a fence is the server's µs at the acquire.
"""

import asyncio
import os
import signal
import subprocess
import sys

import redbell

from conftest import (eventually, kill, python_worker, read_line, redis_url, rust_bin,
                      server_us, unique)

# The child of `redbell run` prints the fence it was given.
PRINT_FENCE = ["sh", "-c", 'echo "held $REDBELL_FENCE"']


def rust_run(*args: str, stdin=None) -> subprocess.Popen:
    return subprocess.Popen([rust_bin("redbell"), "run", *args], stdin=stdin,
                            stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "REDIS_URL": redis_url()})


async def queued(raw, key: str, n: int, timeout: float = 10) -> bool:
    """Whether ``key`` (a waiter queue) holds ``n`` members (``~`` aside) in time."""
    async def check():
        return len([m for m in await raw.zrange(key, 0, -1) if m != b"~"]) >= n
    return await eventually(check, timeout)


async def test_rust_holder_wakes_a_python_waiter(client, raw):
    name = unique("r2p")
    holder = rust_run(name, "--", "sh", "-c", 'echo "held $REDBELL_FENCE"; read x',
                      stdin=subprocess.PIPE)
    try:
        rust_fence = int((await read_line(holder, 20)).split()[1])
        waiter = asyncio.ensure_future(client.mutex(name).lock())
        assert await queued(raw, f"redbell:{{{name}}}:waiters", 1), "python waiter never queued"
        t0 = await server_us(raw)
        holder.stdin.write("\n")
        holder.stdin.flush()
        g = await asyncio.wait_for(waiter, 20)
        lag_ms = (g.fence - t0) / 1000
        print(f"rust release -> python holds: {lag_ms:.1f} ms (incl. the child's exit)")
        assert g.fence > rust_fence
        # The lease is 30 s: a waiter that missed the wake-up parks ~30 s.
        assert lag_ms < 2000, f"python waiter took {lag_ms} ms after the release"
        await g.unlock()
        assert holder.wait(10) == 0
    finally:
        kill(holder)


async def test_python_holder_wakes_a_rust_waiter(client, raw):
    name = unique("p2r")
    g = await client.mutex(name).lock()
    waiter = rust_run("-w", "30s", name, "--", *PRINT_FENCE)
    try:
        assert await queued(raw, f"redbell:{{{name}}}:waiters", 1), "rust waiter never queued"
        t0 = await server_us(raw)
        await g.unlock()
        rust_fence = int((await read_line(waiter, 20)).split()[1])
        lag_ms = (rust_fence - t0) / 1000
        print(f"python release -> rust holds: {lag_ms:.1f} ms")
        assert rust_fence > g.fence
        assert lag_ms < 2000, f"rust waiter took {lag_ms} ms after the release"
        assert waiter.wait(10) == 0
    finally:
        kill(waiter)


async def test_fences_increase_across_languages(client):
    name = unique("fences")
    fences = []
    for i in range(6):
        if i % 2:
            p = rust_run(name, "--", *PRINT_FENCE)
            fences.append(("rust", int((await read_line(p, 20)).split()[1])))
            assert p.wait(10) == 0
        else:
            g = await client.mutex(name).lock()
            fences.append(("python", g.fence))
            await g.unlock()
    values = [f for _, f in fences]
    assert all(a < b for a, b in zip(values, values[1:])), fences


async def test_fair_lock_is_fifo_across_languages(client, raw):
    name = unique("fifo")
    fifo, order = f"redbell:{{{name}}}:fifo", f"redbell-test:{{{name}}}:order"
    push = [sys.executable, "-c",
            "import os, sys, redis; redis.Redis.from_url(os.environ['REDIS_URL'])"
            ".rpush(sys.argv[1], sys.argv[2])", order]
    holder = await client.fair_mutex(name).lock()
    others = [await redbell.connect(redis_url()) for _ in range(2)]
    procs, tasks = [], []

    async def py_waiter(c, tag):
        async with c.fair_mutex(name):
            await raw.rpush(order, tag)
    try:
        for i, tag in enumerate(["R1", "P2", "R3", "P4"]):
            if tag[0] == "R":
                procs.append(rust_run("--fair", "-w", "30s", name, "--", *push, tag))
            else:
                tasks.append(asyncio.ensure_future(py_waiter(others[len(tasks)], tag)))
            assert await queued(raw, fifo, i + 1), f"{tag} never queued"
        await holder.unlock()
        await asyncio.wait_for(asyncio.gather(*tasks), 30)
        for p in procs:
            assert p.wait(30) == 0
        got = [x.decode() for x in await raw.lrange(order, 0, -1)]
        assert got == ["R1", "P2", "R3", "P4"], f"served out of arrival order: {got}"
    finally:
        for p in procs:
            kill(p)
        for c in others:
            await c.aclose()


async def test_one_semaphore_shared_by_both_languages(raw):
    name = unique("sem")
    rust = [subprocess.Popen([rust_bin("sem_worker"), "loop", name, "2", "15"],
                             stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "REDIS_URL": redis_url()}) for _ in range(2)]
    py = [python_worker("sem", name, "2", "15") for _ in range(2)]
    try:
        lines = [await read_line(p, 90) for p in rust + py]
        print("semaphore workers:", lines)
        for line in lines:
            stats = dict(kv.split("=") for kv in line.split())
            assert stats["over"] == "0" and int(stats["max"]) <= 2, line
            assert stats["done"] == "15", line
    finally:
        for p in rust + py:
            kill(p)


async def test_killed_python_holder_is_taken_over_by_rust_at_expiry(raw):
    name = unique("killed")
    holder = python_worker("hold", "mutex", name, "1.0")
    waiter = None
    try:
        py_fence = int((await read_line(holder, 20)).split()[1])
        waiter = rust_run("-w", "30s", name, "--", *PRINT_FENCE)
        assert await queued(raw, f"redbell:{{{name}}}:waiters", 1), "rust waiter never queued"
        holder.send_signal(signal.SIGKILL)
        holder.wait()
        t = await server_us(raw)
        pttl = await raw.pttl(f"redbell:{{{name}}}")
        assert pttl > 0, f"the killed holder's key has pttl {pttl}"
        expiry_us = t + pttl * 1000
        rust_fence = int((await read_line(waiter, 20)).split()[1])
        late_ms = (rust_fence - expiry_us) / 1000
        print(f"rust took the killed python holder's lock {late_ms:.1f} ms after its expiry")
        assert rust_fence > py_fence
        assert -5 < late_ms < 1000, f"taken {late_ms} ms after the lease expired"
    finally:
        kill(holder)
        if waiter is not None:
            kill(waiter)


async def test_a_frozen_python_holder_sees_its_loss_before_acting_again(raw):
    """A Python holder (lease 1 s) acts under its lock every 20 ms, checking
    ``guard.is_lost`` first; it is SIGSTOPped past its lease and a Rust
    waiter takes the lock. Once resumed it must see the loss before its
    next act: no ``py`` entry may follow the one this test pushes once
    Rust holds the lock."""
    name = unique("frozen-holder")
    log = f"redbell-test:{{{name}}}:log"
    holder = python_worker("act", "mutex", name, "1.0")
    waiter = None
    try:
        py_fence = int((await read_line(holder, 20)).split()[1])
        await asyncio.sleep(0.3)
        holder.send_signal(signal.SIGSTOP)
        waiter = rust_run("-w", "30s", name, "--", *PRINT_FENCE)
        rust_fence = int((await read_line(waiter, 20)).split()[1])
        assert rust_fence > py_fence
        await raw.rpush(log, "rust")  # Rust has held the lock by now
        holder.send_signal(signal.SIGCONT)
        assert await read_line(holder, 20) == "lost"
        entries = await raw.lrange(log, 0, -1)
        after = entries[entries.index(b"rust") + 1:]
        assert entries.index(b"rust") > 0, "the holder never acted: the test proved nothing"
        assert not after, f"the resumed holder acted {len(after)} time(s) after losing the lock"
    finally:
        holder.send_signal(signal.SIGCONT)
        kill(holder)
        if waiter is not None:
            kill(waiter)
        await raw.delete(log)


async def test_a_frozen_python_waiter_stalls_nobody(client, raw):
    """The release wakes the frozen waiter (its socket is open: a receiver);
    the standby sent with it lets the Rust waiter behind attempt after 200
    ms. Without it the Rust waiter would park on the 30 s lease it saw."""
    name = unique("frozen")
    waiters = f"redbell:{{{name}}}:waiters"
    g = await client.mutex(name).lock()
    frozen = python_worker("wait", "mutex", name)
    rust = None
    try:
        assert await read_line(frozen, 20) == "waiting"
        assert await queued(raw, waiters, 1), "python waiter never queued"
        [py_member] = await raw.zrange(waiters, 0, -1)
        frozen.send_signal(signal.SIGSTOP)
        rust = rust_run("-w", "60s", name, "--", *PRINT_FENCE)
        assert await queued(raw, waiters, 2), "rust waiter never queued"
        # The Mutex queue is ordered by entry expiry, equal here to the ms:
        # put the frozen waiter first so the release wakes it, not Rust.
        rust_score = min(sc for m, sc in await raw.zrange(waiters, 0, -1, withscores=True)
                         if m != py_member)
        await raw.zadd(waiters, {py_member: int(rust_score) - 1})
        t0 = await server_us(raw)
        await g.unlock()
        rust_fence = int((await read_line(rust, 30)).split()[1])
        stall_ms = (rust_fence - t0) / 1000
        print(f"rust behind a frozen python waiter: held {stall_ms:.1f} ms after the release")
        assert stall_ms < 2000, f"the frozen waiter stalled the rust waiter {stall_ms} ms"
    finally:
        frozen.send_signal(signal.SIGCONT)
        kill(frozen)
        if rust is not None:
            kill(rust)
