"""The command connection under faults: script calls share one multiplexed
connection (redbell/_mux.py); a killed connection is replaced by the next
call, and a server that stops answering fails the calls in flight after the
response timeout instead of hanging them."""

import asyncio
import os
import shutil
import signal
import socket
import subprocess
import time

import pytest
import redis.asyncio as aioredis

import redbell

from conftest import redis_url, unique


@pytest.fixture
def own_server():
    """A private redis-server on a free port (stopped with SIGCONT + SIGKILL)."""
    exe = os.environ.get("REDBELL_REDIS_SERVER") or shutil.which("redis-server")
    if not exe:
        pytest.fail("redis-server not found: run through scripts/with-redis.sh")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no"], stdout=subprocess.DEVNULL)
    end = time.monotonic() + 10
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            break
        except OSError:
            if time.monotonic() > end or proc.poll() is not None:
                proc.kill()
                pytest.fail("redis-server did not start")
            time.sleep(0.02)
    yield proc, f"redis://127.0.0.1:{port}"
    os.kill(proc.pid, signal.SIGCONT)
    proc.kill()
    proc.wait()


async def test_killed_command_connection_is_replaced(raw):
    name = unique("conn-kill")
    c = await redbell.connect(redis_url())
    try:
        g = await c.mutex(name).lock()
        # Every normal connection but this test's own: the client's command
        # connection among them (its pub/sub connection is not opened).
        killed = await raw.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
        assert killed >= 1
        # A call written before the client read the EOF fails with the old
        # connection (RedisError); a later one runs on a new connection.
        other = c.mutex(name + "-other")
        for _ in range(50):
            try:
                g2 = await other.try_lock()
                break
            except redbell.RedisError:
                await asyncio.sleep(0.02)
        else:
            pytest.fail("no call succeeded after the connection was killed")
        assert g2 is not None
        await g2.unlock()
        await g.unlock()  # the hold survived the connection
        assert await raw.exists(f"redbell:{{{name}}}") == 0
        g2 = await c.mutex(name).try_lock()
        assert g2 is not None
        await g2.unlock()
    finally:
        await c.aclose()


async def test_a_release_on_a_killed_connection_is_sent_again(raw):
    """A release in flight when the server kills its connection is re-sent
    on a fresh one: the lock is free at once, not after its lease. The
    release is held in the server by CLIENT PAUSE WRITE while the
    connection is killed under it."""
    name = unique("conn-kill-release")
    c = await redbell.connect(redis_url())
    try:
        g = await c.mutex(name, lease=30.0).lock()
        await raw.execute_command("CLIENT", "PAUSE", 5000, "WRITE")
        try:
            unlock = asyncio.ensure_future(g.unlock())
            await asyncio.sleep(0.2)
            assert not unlock.done()
            killed = await raw.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME",
                                               "yes")
            assert killed >= 1
            await asyncio.sleep(0.1)
        finally:
            await raw.execute_command("CLIENT", "UNPAUSE")
        await asyncio.wait_for(unlock, 10)
        assert await raw.exists(f"redbell:{{{name}}}") == 0
    finally:
        await c.aclose()


async def test_stalled_server_fails_calls_after_the_response_timeout(own_server):
    proc, url = own_server
    name = unique("conn-stall")
    c = await redbell.connect(url)
    try:
        g = await c.mutex(name).lock()
        await g.unlock()
        os.kill(proc.pid, signal.SIGSTOP)
        t = time.monotonic()
        calls = [asyncio.ensure_future(c.mutex(f"{name}-{i}").try_lock()) for i in range(3)]
        done, _ = await asyncio.wait(calls, timeout=30)
        waited = time.monotonic() - t
        assert len(done) == 3, "calls to a stopped server hung past 30 s"
        for f in done:
            assert isinstance(f.exception(), redbell.RedisError), f.exception()
        assert waited >= 1.0, f"failed after {waited:.2f} s, before the response timeout"
        os.kill(proc.pid, signal.SIGCONT)
        # The next call opens a new connection and succeeds.
        g = await asyncio.wait_for(c.mutex(name).lock(), 30)
        assert g.fence > 0
        await g.unlock()
        r = aioredis.Redis.from_url(url, protocol=2)
        assert await r.exists(f"redbell:{{{name}}}") == 0
        await r.aclose()
    finally:
        os.kill(proc.pid, signal.SIGCONT)
        await c.aclose()
