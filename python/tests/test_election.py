"""Election: campaign, leader, proclaim, resign, cancel safety, and one
election shared with the Rust CLI (``redbell elect`` / ``redbell leader``)."""

import asyncio
import os
import subprocess

import pytest

import redbell

from conftest import eventually, kill, read_line, redis_url, rust_bin, unique


def rust(*args: str, stdin=None) -> subprocess.Popen:
    return subprocess.Popen([rust_bin("redbell"), *args], stdin=stdin, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "REDIS_URL": redis_url()})


async def test_campaign_proclaim_resign(client):
    name = unique("elect")
    other = await redbell.connect(redis_url())
    try:
        e = client.election(name)
        assert await e.leader() is None
        lead = await e.campaign("a")
        assert await e.leader() == redbell.Leader(lead.term, "a")
        rival = asyncio.ensure_future(other.election(name).campaign("b"))
        await asyncio.sleep(0.3)
        assert not rival.done()
        await lead.proclaim("a2")
        assert (await other.election(name).leader()).value == "a2"
        await lead.resign()
        with pytest.raises(redbell.NotHeld):
            await lead.resign()
        second = await asyncio.wait_for(rival, 5)  # lease 30 s: a lost wake-up would time out
        assert second.term > lead.term
        assert await e.leader() == redbell.Leader(second.term, "b")
        with pytest.raises(redbell.KindConflict):
            await client.mutex(name).try_lock()
        with pytest.raises(redbell.Timeout):
            await e.campaign("c", timeout=0.2)
        await second.resign()
        assert await e.leader() is None
    finally:
        await other.aclose()


async def test_a_cancelled_campaign_leaves_no_leader(client, raw):
    name = unique("elect-cancel")
    e = client.election(name)
    lead = await e.campaign("a")
    waiting = [asyncio.ensure_future(e.campaign(f"w{i}")) for i in range(3)]
    await asyncio.sleep(0.2)
    for w in waiting:
        w.cancel()
    await asyncio.gather(*waiting, return_exceptions=True)
    await lead.resign()
    # Cancelled right as it was elected, repeatedly: never a leader left behind.
    for i in range(40):
        t = asyncio.ensure_future(e.campaign("x"))
        await asyncio.sleep(0.0002 * i)  # from before the acquire to after the proclamation
        t.cancel()
        try:
            got = await t
            await got.resign()
        except asyncio.CancelledError:
            pass

    async def vacant():
        return (await e.leader() is None and not await raw.exists(f"redbell:{{{name}}}")
                and await raw.zcard(f"redbell:{{{name}}}:waiters") == 0)
    assert await eventually(vacant, 3), "a cancelled campaign left a leader or a queue entry"


async def test_a_rust_leader_then_a_python_candidate(client):
    name = unique("elect-r2p")
    leader = rust("elect", "--value", "rust", name, "--", "sh", "-c",
                  'echo "term $REDBELL_TERM"; read x', stdin=subprocess.PIPE)
    try:
        rust_term = int((await read_line(leader, 20)).split()[1])
        e = client.election(name)
        assert await e.leader() == redbell.Leader(rust_term, "rust")
        candidate = asyncio.ensure_future(e.campaign("python"))
        await asyncio.sleep(0.3)
        assert not candidate.done()
        leader.stdin.write("\n")
        leader.stdin.flush()
        lead = await asyncio.wait_for(candidate, 10)  # lease 30 s: a lost wake-up would time out
        assert lead.term > rust_term
        assert leader.wait(10) == 0
        shown = rust("leader", name)
        out, _ = shown.communicate(timeout=20)
        assert "python" in out and str(lead.term) in out, out
        await lead.resign()
    finally:
        kill(leader)


async def test_a_python_leader_then_a_rust_candidate(client):
    name = unique("elect-p2r")
    lead = await client.election(name).campaign("python")
    candidate = rust("elect", "--value", "rust", name, "--", "sh", "-c",
                     'echo "term $REDBELL_TERM"')
    try:
        await asyncio.sleep(0.5)
        assert candidate.poll() is None
        await lead.resign()
        rust_term = int((await read_line(candidate, 10)).split()[1])
        assert rust_term > lead.term
        assert candidate.wait(10) == 0
    finally:
        kill(candidate)


def test_the_sync_face_has_rwlock_and_election():
    from redbell import sync
    with sync.connect(redis_url()) as c:
        rw = c.rwlock(unique("sync-rw"))
        with rw.read() as r:
            assert rw.try_write() is None
            assert r.fence == 0
        with rw.write(timeout=1) as w:
            assert rw.try_read() is None and w.fence > 0
        e = c.election(unique("sync-elect"))
        lead = e.campaign("s")
        assert e.leader() == redbell.Leader(lead.term, "s")
        lead.proclaim("t")
        assert lead.value == "t" and e.leader().value == "t"
        lead.resign()
        assert e.leader() is None
