"""The floor of one round trip to Redis from Python, per way of making it:
the CPU time (``time.process_time()``) and wall time per sequential
``PING``, medians of interleaved rounds. A hand-off costs its processes a
few such round trips each (the woken waiter's attempt, the holder's
release, the releaser's next attempt), so these floors bound what any
client library on that I/O path can reach.

Usage (REDIS_URL set)::

    python python/bench/roundtrip.py [--n 5000] [--rounds 5]

Asserts nothing: its figures depend on the machine.
"""

import argparse
import asyncio
import os
import socket
import statistics
import sys
import time
from urllib.parse import urlparse

import redis

URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379")
PING = b"*1\r\n$4\r\nPING\r\n"


def _sync_socket(n: int) -> None:
    u = urlparse(URL)
    s = socket.create_connection((u.hostname, u.port or 6379))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    for _ in range(n):
        s.sendall(PING)
        s.recv(64)
    s.close()


def _sync_redispy(n: int) -> None:
    r = redis.Redis.from_url(URL, protocol=2)
    for _ in range(n):
        r.execute_command("PING")
    r.close()


def _asyncio_protocol(n: int) -> None:
    async def run() -> None:
        loop = asyncio.get_running_loop()
        u = urlparse(URL)

        class P(asyncio.Protocol):
            fut: "asyncio.Future[bytes]"

            def data_received(self, data: bytes) -> None:
                self.fut.set_result(data)

        t, p = await loop.create_connection(P, u.hostname, u.port or 6379)
        for _ in range(n):
            p.fut = loop.create_future()
            t.write(PING)
            await p.fut
        t.close()
    asyncio.run(run())


def _redbell_mux(n: int) -> None:
    from redbell._calls import _Call
    from redbell._client import Client
    from redbell._mux import pack

    async def run() -> None:
        c = Client(URL)
        mux = c._mux
        packed = pack(("PING",))
        for _ in range(n):
            call = _Call()
            mux.send(packed, call.settle)
            await call
        await c.aclose()
    asyncio.run(run())


def _asyncio_redispy(n: int) -> None:
    async def run() -> None:
        r = redis.asyncio.Redis.from_url(URL, protocol=2)
        for _ in range(n):
            await r.execute_command("PING")
        await r.aclose()
    asyncio.run(run())


WAYS = [
    ("sync socket (sendall + recv)", _sync_socket),
    ("redis-py sync client", _sync_redispy),
    ("asyncio Protocol + future (bare)", _asyncio_protocol),
    ("redbell's multiplexed connection", _redbell_mux),
    ("redis-py asyncio client", _asyncio_redispy),
]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=5000, help="round trips per run")
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    res: dict = {k: [] for k, _ in WAYS}
    for i in range(args.rounds):
        for k, f in WAYS[i % len(WAYS):] + WAYS[:i % len(WAYS)]:
            t, c = time.perf_counter(), time.process_time()
            f(args.n)
            res[k].append(((time.process_time() - c) / args.n * 1e6,
                           (time.perf_counter() - t) / args.n * 1e6))
            print(f"round {i + 1}: {k}: {res[k][-1][0]:.1f} µs CPU, "
                  f"{res[k][-1][1]:.1f} µs wall", file=sys.stderr)
    print(f"load average {os.getloadavg()[0]:.1f}; {args.n} PINGs per run, "
          f"{args.rounds} rounds, medians")
    print("| way | CPU µs / round trip | wall µs / round trip |")
    print("|---|---|---|")
    for k, v in res.items():
        print(f"| {k} | {statistics.median(x[0] for x in v):.1f} "
              f"| {statistics.median(x[1] for x in v):.1f} |")


if __name__ == "__main__":
    main()
