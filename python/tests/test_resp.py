"""The RESP2 reader of the command and pub/sub connections (redbell/_resp.py):
every reply shape it reads, whole or in pieces, malformed bytes refused,
error replies as redis-py's exceptions, and connections that die under a
call, mid-reply included (a relay in front of the real server cuts them),
or refuse it at connect."""

import asyncio
import os
import subprocess
from typing import Optional
from urllib.parse import urlparse

import pytest
from redis import exceptions as rexc

import redbell
from redbell._calls import _Call
from redbell._mux import pack
from redbell._resp import Reader

from conftest import REPO, eventually, redis_url, unique
from topology import Proxy, free_base

SHAPES = (b"+OK\r\n:42\r\n:-7\r\n$-1\r\n$0\r\n\r\n$5\r\nab\r\nc\r\n"
          b"*3\r\n:1\r\n*2\r\n$1\r\na\r\n$-1\r\n+x\r\n*-1\r\n*0\r\n"
          b"-NOSCRIPT No matching script.\r\n-WRONGKIND the lock name is in use\r\n")


def _check_shapes(replies) -> None:
    assert replies[:10] == [b"OK", 42, -7, None, b"", b"ab\r\nc", [1, [b"a", None], b"x"],
                            None, [], replies[9]]
    assert isinstance(replies[9], rexc.NoScriptError)
    assert isinstance(replies[10], rexc.ResponseError)
    assert str(replies[10]) == "WRONGKIND the lock name is in use"
    assert len(replies) == 11


def test_every_shape_whole_and_byte_by_byte():
    _check_shapes(Reader().feed(SHAPES))
    r = Reader()
    got = []
    for i in range(len(SHAPES)):
        got += r.feed(SHAPES[i:i + 1])
    _check_shapes(got)
    # Split at every point: the part before never yields a reply it cuts.
    for cut in range(len(SHAPES)):
        r = Reader()
        _check_shapes(r.feed(SHAPES[:cut]) + r.feed(SHAPES[cut:]))


@pytest.mark.parametrize("bad", [b"?what\r\n", b":12x\r\n", b"$3\r\nabcd\r\n", b"*x\r\n",
                                 b"$zz\r\n", b"*1\r\n!\r\n"])
def test_malformed_bytes_are_refused(bad):
    with pytest.raises(rexc.InvalidResponse):
        Reader().feed(b":1\r\n" + bad)


class Relay:
    """A TCP relay to the real server that, once armed with a pattern,
    forwards the server's bytes only up to a few bytes past the pattern's
    next occurrence and then closes both sides: a connection dying in the
    middle of a reply."""

    def __init__(self) -> None:
        u = urlparse(redis_url())
        self._target = (u.hostname, u.port or 6379)
        self.cut_on: Optional[bytes] = None
        self.cut = asyncio.Event()
        self._server: Optional[asyncio.AbstractServer] = None
        self._tasks: set = set()

    async def __aenter__(self) -> "Relay":
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc) -> None:
        assert self._server is not None
        self._server.close()
        for t in list(self._tasks):
            t.cancel()

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"redis://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def _serve(self, cr: asyncio.StreamReader, cw: asyncio.StreamWriter) -> None:
        sr, sw = await asyncio.open_connection(*self._target)

        async def pump(src, dst, down: bool) -> None:
            try:
                while True:
                    data = await src.read(65536)
                    if not data:
                        break
                    at = data.find(self.cut_on) if down and self.cut_on else -1
                    if at >= 0:
                        self.cut_on = None
                        dst.write(data[:at + 10])  # a reply's head, not its end
                        await dst.drain()
                        self.cut.set()
                        break
                    dst.write(data)
            except (ConnectionError, asyncio.CancelledError):
                pass
            finally:
                cw.close()
                sw.close()
        for t in (pump(cr, sw, False), pump(sr, cw, True)):
            task = asyncio.ensure_future(t)
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)


def _sink(call: _Call):
    """A mux sink settling ``call``, whose ``written`` says whether the
    mux wrote the command."""
    def sink(reply, error, sent: bool) -> None:
        call.written = sent
        call.settle(reply, error)
    return sink


async def test_call_cut_mid_reply_fails_and_the_next_one_reconnects(raw):
    key = unique("resp-cut")
    await raw.set(key, b"v" * 100)
    async with Relay() as relay:
        c = await redbell.connect(relay.url)
        try:
            relay.cut_on = b"$100\r\n"
            call = _Call()
            c._mux.send(pack(("GET", key)), _sink(call))
            with pytest.raises(rexc.ConnectionError):
                await asyncio.wait_for(call, 10)
            assert relay.cut.is_set()
            assert call.written, "a call cut mid-reply was reported as never sent"
            again = _Call()
            c._mux.send(pack(("GET", key)), _sink(again))
            assert await asyncio.wait_for(again, 10) == b"v" * 100
            err = _Call()
            c._mux.send(pack(("EVALSHA", "0" * 40, 0)), _sink(err))
            with pytest.raises(rexc.NoScriptError):
                await asyncio.wait_for(err, 10)
        finally:
            await c.aclose()
    await raw.delete(key)


async def test_acquire_cut_mid_reply_is_sent_again_and_holds(raw):
    name = unique("resp-acq")
    async with Relay() as relay:
        c = await redbell.connect(relay.url)
        try:
            relay.cut_on = b"*2\r\n:1\r\n:"  # the head of an acquire's {1, fence}
            g = await asyncio.wait_for(c.mutex(name).lock(), 10)
            assert relay.cut.is_set()
            assert await raw.get(f"redbell:{{{name}}}") == g.token.encode()
            await g.unlock()
        finally:
            await c.aclose()


async def test_wake_message_cut_mid_reply_still_wakes_the_waiter(client):
    name = unique("resp-wake")
    g = await client.mutex(name, lease=30).lock()
    async with Relay() as relay:
        c = await redbell.connect(relay.url)
        try:
            waiter = asyncio.ensure_future(c.mutex(name).lock())
            # Parked behind a 30 s lease: only a message (or a resubscribe) wakes it.
            await asyncio.sleep(0.5)
            assert not waiter.done()
            relay.cut_on = b"message\r\n"
            await g.unlock()
            # The hub reconnects, resubscribes and wakes its waiters.
            g2 = await asyncio.wait_for(waiter, 10)
            assert relay.cut.is_set()
            await g2.unlock()
        finally:
            await c.aclose()


async def test_call_on_a_killed_connection_fails_at_once(raw):
    c = await redbell.connect(redis_url())
    try:
        key = unique("resp-kill")
        call = _Call()
        c._mux.send(pack(("BLPOP", key, 30)), _sink(call))
        # The mux's connection is the one blocked on this key.
        await asyncio.sleep(0.2)
        clients = (await raw.execute_command("CLIENT", "LIST")).decode()
        ids = [f.split("=")[1] for line in clients.splitlines() if "cmd=blpop" in line
               for f in line.split() if f.startswith("id=")]
        assert len(ids) == 1
        await raw.execute_command("CLIENT", "KILL", "ID", ids[0])
        with pytest.raises(rexc.ConnectionError):
            await asyncio.wait_for(call, 10)
    finally:
        await c.aclose()


async def test_call_whose_connect_is_refused_is_reported_never_sent():
    """The server is gone (the proxy in front of it closed): the next call
    fails at connect, and the mux says it never wrote it, so nothing of it
    ran (the client then queues no release for such an attempt)."""
    proxy = Proxy(urlparse(redis_url()).port or 6379)
    await proxy.start()
    c = await redbell.connect(f"redis://127.0.0.1:{proxy.port}")
    try:
        warm = _Call()
        c._mux.send(pack(("PING",)), _sink(warm))
        assert await asyncio.wait_for(warm, 10) == b"PONG" and warm.written
        await proxy.cut()

        async def lost() -> bool:  # else the call is written to the dying link
            return c._mux._link is None
        assert await eventually(lost, 10), "the mux did not see its connection end"
        call = _Call()
        c._mux.send(pack(("PING",)), _sink(call))
        with pytest.raises(rexc.ConnectionError):
            await asyncio.wait_for(call, 10)
        assert not call.written, "a call refused at connect was reported as sent"
    finally:
        await c.aclose()
        await proxy.cut()


@pytest.fixture
def tls_url():
    """A TLS-only server of scripts/redis/tls.sh on free ports (stopped after)."""
    port = free_base([0, 1])  # tls.sh starts a second server on port + 1
    script = os.path.join(REPO, "scripts", "redis", "tls.sh")
    out = subprocess.run([script, "start", str(port)], capture_output=True, text=True,
                         timeout=120)
    if out.returncode != 0:
        pytest.fail(f"tls.sh start failed: {out.stderr[-500:]}")
    ca = os.path.join(REPO, "target", "redis", "tls", "ca.crt")
    yield f"{out.stdout.split()[0]}?ssl_ca_certs={ca}"
    subprocess.run([script, "stop", str(port)], capture_output=True, timeout=60)


async def test_waiter_woken_over_tls(tls_url):
    # Both connections read through the protocol over the TLS transport.
    name = unique("resp-tls")
    a, b = await redbell.connect(tls_url), await redbell.connect(tls_url)
    try:
        g = await a.mutex(name).lock()
        waiter = asyncio.ensure_future(b.mutex(name).lock())
        await asyncio.sleep(0.3)
        assert not waiter.done()
        await g.unlock()
        g2 = await asyncio.wait_for(waiter, 10)
        assert g2.fence > g.fence
        await g2.unlock()
    finally:
        await a.aclose()
        await b.aclose()
