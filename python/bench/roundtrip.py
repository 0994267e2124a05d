"""The floor of one round trip to Redis from Python, per way of making it:
the CPU time (``time.process_time()``) and wall time per sequential
``PING`` (connections opened beforehand), medians of interleaved rounds;
and per wake-up of one process by another through Redis. A hand-off costs its processes a
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
from typing import Optional
from urllib.parse import urlparse

import redis

URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379")
PING = b"*1\r\n$4\r\nPING\r\n"


def _clock() -> "tuple[float, float]":
    return time.process_time(), time.perf_counter()


def _since(t0: "tuple[float, float]") -> "tuple[float, float]":
    return time.process_time() - t0[0], time.perf_counter() - t0[1]


def _sync_socket(n: int) -> "tuple[float, float]":
    u = urlparse(URL)
    s = socket.create_connection((u.hostname, u.port or 6379))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    t0 = _clock()
    for _ in range(n):
        s.sendall(PING)
        s.recv(64)
    took = _since(t0)
    s.close()
    return took


def _sync_redispy(n: int) -> "tuple[float, float]":
    r = redis.Redis.from_url(URL, protocol=2)
    r.execute_command("PING")  # connected
    t0 = _clock()
    for _ in range(n):
        r.execute_command("PING")
    took = _since(t0)
    r.close()
    return took


def _asyncio_protocol(n: int) -> "tuple[float, float]":
    async def run() -> "tuple[float, float]":
        loop = asyncio.get_running_loop()
        u = urlparse(URL)

        class P(asyncio.Protocol):
            fut: "asyncio.Future[bytes]"

            def data_received(self, data: bytes) -> None:
                self.fut.set_result(data)

        t, p = await loop.create_connection(P, u.hostname, u.port or 6379)
        t0 = _clock()
        for _ in range(n):
            p.fut = loop.create_future()
            t.write(PING)
            await p.fut
        took = _since(t0)
        t.close()
        return took
    return asyncio.run(run())


def _redbell_mux(n: int) -> "tuple[float, float]":
    from redbell._calls import _Call
    from redbell._client import Client
    from redbell._mux import pack

    async def run() -> "tuple[float, float]":
        c = Client(URL)
        mux = c._mux
        packed = pack(("PING",))
        t0 = None
        for i in range(n + 1):  # the first one opens the connection
            call = _Call()
            mux.send(packed, lambda reply, e, _sent, call=call: call.settle(reply, e))
            await call
            if i == 0:
                t0 = _clock()
        took = _since(t0)
        await c.aclose()
        return took
    return asyncio.run(run())


def _asyncio_redispy(n: int) -> "tuple[float, float]":
    async def run() -> "tuple[float, float]":
        r = redis.asyncio.Redis.from_url(URL, protocol=2)
        await r.execute_command("PING")  # connected
        t0 = _clock()
        for _ in range(n):
            await r.execute_command("PING")
        took = _since(t0)
        await r.aclose()
        return took
    return asyncio.run(run())


# -- wake-ups: two processes wake each other through Redis ------------------

def _gate(me: str, other: str) -> None:
    """Return once both sides are ready (their connections open)."""
    r = redis.Redis.from_url(URL, protocol=2)
    r.incr(me + ":ready")
    while int(r.get(other + ":ready") or 0) == 0:
        time.sleep(0.001)
    r.close()


def _blpop_side(me: str, other: str, n: int, first: bool, q) -> None:
    r = redis.Redis.from_url(URL, protocol=2)
    r.ping()
    _gate(me, other)
    pipe = r.pipeline(transaction=False)
    c, t = time.process_time(), time.perf_counter()
    for i in range(n):
        if first or i:  # one write, as a PUBLISH is: LPUSH's reply is not waited for alone
            pipe.lpush(other, 1)
            pipe.blpop([me], 0)
            pipe.execute()
        else:
            r.blpop([me], 0)
    if not first:
        r.lpush(other, 1)
    q.put((time.process_time() - c, time.perf_counter() - t))


def _pubsub_side(me: str, other: str, n: int, first: bool, q) -> None:
    """Subscribed to ``me`` on one connection (an asyncio Protocol), PUBLISH
    to ``other`` on another: redbell's wake-up path without the lock."""
    async def run() -> "tuple[float, float]":
        loop = asyncio.get_running_loop()
        u = urlparse(URL)

        from redbell._resp import Reader

        class P(asyncio.Protocol):
            """Counts whole replies; ``fut`` resolves at the ``want``-th."""
            fut: "Optional[asyncio.Future[None]]" = None

            def __init__(self) -> None:
                self.reader, self.got, self.want = Reader(), 0, 1

            def data_received(self, data: bytes) -> None:
                self.got += len(self.reader.feed(data))
                if self.got >= self.want and self.fut is not None and not self.fut.done():
                    self.fut.set_result(None)

        st, sp = await loop.create_connection(P, u.hostname, u.port or 6379)
        ct, cp = await loop.create_connection(P, u.hostname, u.port or 6379)
        sp.fut = loop.create_future()
        st.write(b"*2\r\n$9\r\nSUBSCRIBE\r\n$%d\r\n%s\r\n" % (len(me), me.encode()))
        await sp.fut  # confirmed
        pub = b"*3\r\n$7\r\nPUBLISH\r\n$%d\r\n%s\r\n$1\r\nx\r\n" % (
            len(other), other.encode())
        _gate(me, other)  # both sides subscribed before the first message
        c, t = time.process_time(), time.perf_counter()
        for i in range(n):
            sp.fut = loop.create_future()
            sp.want += 1
            if first or i:
                ct.write(pub)
            await sp.fut
        if not first:
            ct.write(pub)
        cpu = time.process_time() - c, time.perf_counter() - t
        st.close()
        ct.close()
        return cpu
    q.put(asyncio.run(run()))


def _pingpong(side, n: int) -> "tuple[float, float]":
    """CPU µs (both processes) and wall µs per wake-up, ``n`` round trips."""
    import multiprocessing as mp
    import uuid
    a, b = "rt-" + uuid.uuid4().hex[:8], "rt-" + uuid.uuid4().hex[:8]
    q = mp.Queue()
    ps = [mp.Process(target=side, args=(a, b, n, True, q)),
          mp.Process(target=side, args=(b, a, n, False, q))]
    for p in ps:
        p.start()
    (c1, w1), (c2, w2) = q.get(), q.get()
    for p in ps:
        p.join()
    cpu, wall = c1 + c2, max(w1, w2)
    r = redis.Redis.from_url(URL, protocol=2)
    r.delete(a, b, a + ":ready", b + ":ready")
    return cpu / (2 * n) * 1e6, wall / (2 * n) * 1e6


WAKES = [
    ("LPUSH → BLPOP (redis-py sync)", _blpop_side),
    ("PUBLISH → subscriber (asyncio Protocol)", _pubsub_side),
]


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
    wakes: dict = {k: [] for k, _ in WAKES}
    for i in range(args.rounds):
        for k, f in WAYS[i % len(WAYS):] + WAYS[:i % len(WAYS)]:
            cpu, wall = f(args.n)
            res[k].append((cpu / args.n * 1e6, wall / args.n * 1e6))
            print(f"round {i + 1}: {k}: {res[k][-1][0]:.1f} µs CPU, "
                  f"{res[k][-1][1]:.1f} µs wall", file=sys.stderr)
        for k, side in WAKES[i % 2:] + WAKES[:i % 2]:
            wakes[k].append(_pingpong(side, args.n // 2))
            print(f"round {i + 1}: {k}: {wakes[k][-1][0]:.1f} µs CPU, "
                  f"{wakes[k][-1][1]:.1f} µs wall per wake-up", file=sys.stderr)
    print(f"load average {os.getloadavg()[0]:.1f}; {args.n} PINGs per run, "
          f"{args.rounds} rounds, medians")
    print("")
    print("| one round trip (PING), one process | CPU µs | wall µs |")
    print("|---|---|---|")
    for k, v in res.items():
        print(f"| {k} | {statistics.median(x[0] for x in v):.1f} "
              f"| {statistics.median(x[1] for x in v):.1f} |")
    print("")
    print("| one wake-up of another process through Redis (ping-pong) "
          "| CPU µs, both processes | wall µs |")
    print("|---|---|---|")
    for k, v in wakes.items():
        print(f"| {k} | {statistics.median(x[0] for x in v):.1f} "
              f"| {statistics.median(x[1] for x in v):.1f} |")


if __name__ == "__main__":
    main()
