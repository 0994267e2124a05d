"""Sentinel and cluster topologies for the Python suite, started and stopped
by the project's scripts (``scripts/redis/sentinel.sh``, ``cluster.sh``) on
free ports, as the Rust test kit does (``testkit/src/port.rs``)."""

import asyncio
import os
import random
import signal
import socket
import subprocess
import time
from typing import List

import redis.asyncio

import redbell

from conftest import REPO

SCRIPTS = os.path.join(REPO, "scripts", "redis")


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def free_base(offsets: List[int]) -> int:
    """A base in 20000..32000 (off 6390..6399) with ``base + o`` free for
    every offset, each below 32768, where the kernel's ephemeral range
    starts: a cluster node's bus port (``base + 10000 + i``) there could be
    taken by any outgoing connection between this check and the bind."""
    rng = random.Random()
    top = min(32000, 32768 - max(offsets))
    for _ in range(1000):
        base = 20000 + 16 * rng.randrange((top - 20000) // 16)
        if all(_free(base + o) for o in offsets):
            return base
    raise RuntimeError("no free base port")


def _run(script: str, *args: str) -> List[str]:
    out = subprocess.run([os.path.join(SCRIPTS, script), *args], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, timeout=120)
    if out.returncode != 0:
        raise RuntimeError(f"{script} {' '.join(args)} failed:\n{out.stderr[-3000:]}")
    return [line for line in out.stdout.split("\n") if line.startswith("redis")]


class SentinelTopology:
    """A primary (BASE), a replica (BASE+1), sentinels BASE+10..12 watching
    ``mymaster`` (down-after 1 s)."""

    MASTER = "mymaster"

    def __init__(self) -> None:
        self.base = free_base([0, 1, 2, 10, 11, 12])
        self.sentinel_urls = _run("sentinel.sh", "start", str(self.base))
        self.primary_port = self.base
        self.replica_port = self.base + 1

    def url(self, port: int) -> str:
        return f"redis://127.0.0.1:{port}"

    def kill(self, port: int) -> None:
        """SIGKILL the server on ``port`` (its pid file is the script's)."""
        name = "primary" if port == self.primary_port else "replica"
        with open(os.path.join(REPO, "target", "redis-sentinel", str(self.base),
                               f"{name}.pid")) as f:
            os.kill(int(f.read().strip()), signal.SIGKILL)

    def stop(self) -> None:
        _run("sentinel.sh", "stop", str(self.base))


class ClusterTopology:
    """Six nodes BASE..BASE+5: three primaries, one replica each."""

    def __init__(self) -> None:
        for tries in range(3):
            self.base = free_base([0, 1, 2, 3, 4, 5, 10000, 10001, 10002, 10003, 10004, 10005])
            try:
                self.urls = _run("cluster.sh", "start", str(self.base))
                return
            except RuntimeError as e:
                # A port taken between the check and the bind (the script
                # stopped the nodes it started): another base.
                if "Address already in use" not in str(e) or tries == 2:
                    raise

    def stop(self) -> None:
        _run("cluster.sh", "stop", str(self.base))


def wait_until(pred, timeout: float, step: float = 0.05) -> bool:
    """Poll a blocking predicate."""
    end = time.monotonic() + timeout
    while True:
        if pred():
            return True
        if time.monotonic() >= end:
            return False
        time.sleep(step)


async def lock_retrying(client, name, errors):
    """lock() then unlock(); the time it held. Called again after a
    RedisError (a call in flight during a failover fails; the caller
    retries, as the docs say), each appended to ``errors``."""
    while True:
        try:
            g = await client.mutex(name).lock()
            at = time.monotonic()
            await g.unlock()
            return at
        except redbell.RedisError as e:
            errors.append(repr(e))
            await asyncio.sleep(0.1)


class Proxy:
    """A TCP proxy from 127.0.0.1:``port`` (0: any free one) to
    127.0.0.1:``target``, in the running event loop. :meth:`cut` closes the
    listener and aborts every connection through it (the peers see a reset);
    :meth:`start` again listens on the same port.

    Faults without a reset: while ``black_hole`` is set, bytes are read and
    dropped in both directions (a partition: connections, new ones too, stay
    open and silent); ``drop_reply`` set drops the next bytes the server
    sends and aborts that connection (a reply lost after the command ran).

    Delays: while ``hold_up`` is set, what clients send is held in the proxy
    (the server sees the command only once it is cleared: its answer is
    fresh then); while ``hold_down`` is set, what the server sends is held
    (an answer given now reaches the client once it is cleared: stale)."""

    def __init__(self, target: int, port: int = 0) -> None:
        self.target = target
        self.port = port
        self.black_hole = False
        self.drop_reply = False
        self.hold_up = False
        self.hold_down = False
        self._server = None
        self._transports: list = []
        self._pipes: list = []

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", self.port,
                                                  reuse_address=True)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _handle(self, reader, writer) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target)
        except OSError:
            writer.transport.abort()
            return
        self._transports += [writer.transport, up_writer.transport]

        async def pipe(src, dst, down: bool) -> None:
            try:
                while True:
                    data = await src.read(65536)
                    if not data:
                        break
                    while self.hold_down if down else self.hold_up:
                        await asyncio.sleep(0.01)
                    if self.black_hole:
                        continue
                    if down and self.drop_reply:
                        self.drop_reply = False
                        writer.transport.abort()
                        break
                    dst.write(data)
                    await dst.drain()
            except Exception:
                pass
            finally:
                dst.transport.abort()
        self._pipes += [asyncio.ensure_future(pipe(reader, up_writer, False)),
                        asyncio.ensure_future(pipe(up_reader, writer, True))]

    async def cut(self) -> None:
        if self._server is not None:
            self._server.close()
        for t in self._transports:
            t.abort()
        for p in self._pipes:
            p.cancel()
        self._transports, self._pipes = [], []
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None


class Monitor:
    """``MONITOR`` on the server at 127.0.0.1:``port``: the commands it runs
    from :meth:`start` on, one line each in ``lines``."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.lines: List[str] = []
        self._writer = None
        self._task = None

    async def start(self) -> None:
        reader, self._writer = await asyncio.open_connection("127.0.0.1", self.port)
        self._writer.write(b"MONITOR\r\n")
        await self._writer.drain()
        first = await asyncio.wait_for(reader.readline(), 10)
        assert first == b"+OK\r\n", f"MONITOR on {self.port}: {first!r}"

        async def read() -> None:
            while True:
                line = await reader.readline()
                if not line:
                    return
                self.lines.append(line.decode("utf-8", "replace"))
        self._task = asyncio.ensure_future(read())

    async def sync(self) -> None:
        """Return once every command the server ran before this call is in
        ``lines`` (an ``ECHO`` of a fresh marker has come through)."""
        marker = f"monitor-sync-{random.getrandbits(64):016x}"
        r = redis.asyncio.Redis(host="127.0.0.1", port=self.port, protocol=2)
        try:
            await r.echo(marker)
        finally:
            await r.aclose()
        end = time.monotonic() + 10
        while not any(marker in line for line in self.lines):
            assert time.monotonic() < end, f"MONITOR on {self.port} missed a command"
            assert self._task is not None and not self._task.done(), \
                f"MONITOR on {self.port} was disconnected"
            await asyncio.sleep(0.01)

    def naming(self, word: str) -> List[str]:
        """The commands read so far that name ``word`` (a key, a token)."""
        return [line for line in self.lines if word in line]

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
        if self._writer is not None:
            self._writer.close()
