"""RwLock: readers share, writers exclude and are preferred, cancel
safety, and sharing one RwLock with the Rust CLI (``redbell run -s`` /
``-x``) both ways."""

import asyncio
import os
import random
import subprocess

import pytest

import redbell

from conftest import eventually, kill, read_line, redis_url, rust_bin, unique


def rust_run(*args: str) -> subprocess.Popen:
    return subprocess.Popen([rust_bin("redbell"), "run", *args], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "REDIS_URL": redis_url()})


HOLD = ["sh", "-c", 'echo "held $REDBELL_FENCE"; read x']


async def test_readers_share_writers_exclude_and_are_preferred(client):
    name = unique("rw")
    rw = client.rwlock(name)
    r1, r2 = await rw.read(), await rw.read()
    assert await rw.try_write() is None
    writer = asyncio.ensure_future(rw.write())
    await asyncio.sleep(0.2)
    assert await rw.try_read() is None, "a new reader entered past a waiting writer"
    await r1.unlock()
    await r2.unlock()
    w = await asyncio.wait_for(writer, 5)  # lease 30 s: a lost wake-up would time out
    assert w.fence > 0
    readers = [asyncio.ensure_future(rw.read()) for _ in range(3)]
    await asyncio.sleep(0.2)
    assert not any(r.done() for r in readers)
    await w.unlock()
    got = await asyncio.wait_for(asyncio.gather(*readers), 5)
    assert {g.fence for g in got} == {w.fence}, "a reader's fence is the last writer's"
    for g in got:
        await g.unlock()
    with pytest.raises(redbell.NotHeld):
        await got[0].unlock()
    g = await rw.read()
    with pytest.raises(redbell.KindConflict):
        await client.mutex(name).try_lock()
    await g.unlock()
    with pytest.raises(redbell.Timeout):
        g = await rw.write()
        try:
            await rw.read(timeout=0.2)
        finally:
            await g.unlock()


async def test_read_holds_are_renewed(client):
    rw = client.rwlock(unique("rwrenew"), lease=1.5)
    r, w2 = await rw.read(), None
    await asyncio.sleep(4.5)
    assert not r.is_lost
    await r.unlock()
    w2 = await rw.write()
    await asyncio.sleep(4.5)
    assert not w2.is_lost
    await w2.unlock()


async def test_a_cancelled_writer_withdraws_its_intent(client, raw):
    """A writer cancelled while waiting behind a reader: its intent is
    withdrawn (rw_pass) at once, so new readers enter again."""
    name = unique("rwintent")
    r = await client.rwlock(name).read()
    other = await redbell.connect(redis_url())
    try:
        w = asyncio.ensure_future(other.rwlock(name).write())

        async def intent():
            return await raw.zcard(f"redbell:{{{name}}}:writers") == 1
        assert await eventually(intent, 5)
        assert await client.rwlock(name).try_read() is None
        w.cancel()
        with pytest.raises(asyncio.CancelledError):
            await w

        async def reader_enters():
            g = await client.rwlock(name).try_read()
            if g is not None:
                await g.unlock()
            return g is not None
        assert await eventually(reader_enters, 1), "the cancelled writer's intent stayed"
        await r.unlock()
    finally:
        await other.aclose()


async def test_cancelled_reads_and_writes_leave_nothing_behind(raw):
    prefix = unique("rwcancel")
    names = [f"{prefix}-{i}" for i in range(4)]
    clients = [await redbell.connect(redis_url()) for _ in range(3)]
    rng = random.Random()

    async def churn(c, n):
        for _ in range(4):
            side = c.rwlock(n).write if rng.random() < 0.5 else c.rwlock(n).read
            async with await side():
                await asyncio.sleep(0.005)

    async def one():
        c, n = rng.choice(clients), rng.choice(names)
        side = c.rwlock(n).write if rng.random() < 0.5 else c.rwlock(n).read
        try:
            g = await asyncio.wait_for(side(), rng.uniform(0, 0.5))
        except asyncio.TimeoutError:
            return
        await g.unlock()

    try:
        holders = [asyncio.ensure_future(churn(clients[i % 3], n)) for i, n in enumerate(names)]
        await asyncio.wait_for(asyncio.gather(*[one() for _ in range(40)]), 60)
        await asyncio.gather(*holders)
        for c in clients:
            await c.aclose()  # finishes background releases and intent withdrawals

        async def left():
            out = []
            for n in names:
                b = f"redbell:{{{n}}}"
                if await raw.exists(b):
                    out.append(b)
                for sub in ("readers", "writers"):
                    if await raw.zcard(f"{b}:{sub}"):
                        out.append(f"{b}:{sub}")
            return out

        async def empty():
            return await left() == []
        assert await eventually(empty, 3), f"left behind: {await left()}"
    finally:
        for c in clients:
            if not c._closed:
                await c.aclose()


async def test_a_rust_writer_then_python_readers(client):
    name = unique("rw-r2p")
    writer = rust_run("-x", name, "--", *HOLD)
    other = await redbell.connect(redis_url())
    try:
        rust_fence = int((await read_line(writer, 20)).split()[1])
        readers = [asyncio.ensure_future(c.rwlock(name).read()) for c in (client, other, other)]
        await asyncio.sleep(0.3)
        assert not any(r.done() for r in readers)
        writer.stdin.write("\n")
        writer.stdin.flush()
        got = await asyncio.wait_for(asyncio.gather(*readers), 10)  # lease 30 s
        assert [g.fence for g in got] == [rust_fence] * 3
        assert writer.wait(10) == 0
        w = client.rwlock(name).write()
        for g in got:
            await g.unlock()
        assert (await asyncio.wait_for(w, 10)).fence > rust_fence
    finally:
        kill(writer)
        await other.aclose()


async def test_python_readers_then_a_rust_writer_that_holds_new_readers_back(client, raw):
    name = unique("rw-p2r")
    r = await client.rwlock(name).read()
    writer = rust_run("-x", "-w", "30s", name, "--", "sh", "-c", 'echo "held $REDBELL_FENCE"')
    try:
        async def intent():
            return await raw.zcard(f"redbell:{{{name}}}:writers") == 1
        assert await eventually(intent, 20), "the rust writer never registered its intent"
        assert await client.rwlock(name).try_read() is None, "writer preference across languages"
        await r.unlock()
        fence = int((await read_line(writer, 10)).split()[1])
        assert fence > 0
        assert writer.wait(10) == 0
    finally:
        kill(writer)
