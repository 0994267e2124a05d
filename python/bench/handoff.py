"""Hand-offs per second between Python worker processes, and the cost of an
uncontended lock + unlock, redbell vs python-redis-lock and redis-py's Lock.

Usage (REDIS_URL set; python-redis-lock installed for its rows):
    python python/bench/handoff.py [WORKERS] [SECONDS]

A hand-off is an acquisition by a worker other than the previous holder;
each holder INCRs a counter inside the lock and records its id, so the
rate counts only real transfers between processes. Not part of the suite:
its figures depend on the machine (the report gives them with the load).
"""

import asyncio
import multiprocessing as mp
import os
import sys
import time
import uuid

import redis

URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379")


def _redbell_worker(name: str, seconds: float, wid: int, q) -> None:
    import redbell

    async def run() -> int:
        client = await redbell.connect(URL)
        r = redis.asyncio.Redis.from_url(URL)
        m = client.mutex(name)
        n = 0
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            async with m:
                prev = await r.getset(f"bench:{{{name}}}:last", wid)
                n += prev is not None and int(prev) != wid
        await client.aclose()
        return n
    q.put(asyncio.run(run()))


def _prl_worker(name: str, seconds: float, wid: int, q) -> None:
    import redis_lock
    r = redis.Redis.from_url(URL)
    n = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        with redis_lock.Lock(r, name, expire=30):
            prev = r.getset(f"bench:{{{name}}}:last", wid)
            n += prev is not None and int(prev) != wid
    q.put(n)


def handoffs(worker, workers: int, seconds: float) -> float:
    name = "bench-" + uuid.uuid4().hex[:8]
    q = mp.Queue()
    ps = [mp.Process(target=worker, args=(name, seconds, i, q)) for i in range(workers)]
    for p in ps:
        p.start()
    total = sum(q.get() for _ in ps)
    for p in ps:
        p.join()
    return total / seconds


def uncontended(n: int = 2000) -> "tuple[float, float]":
    import redbell
    r = redis.Redis.from_url(URL)
    lock = r.lock("bench-redispy-" + uuid.uuid4().hex[:8], timeout=30)
    t = time.perf_counter()
    for _ in range(n):
        lock.acquire()
        lock.release()
    redispy = n / (time.perf_counter() - t)

    async def run() -> float:
        client = await redbell.connect(URL)
        m = client.mutex("bench-rb-" + uuid.uuid4().hex[:8])
        t = time.perf_counter()
        for _ in range(n):
            g = await m.lock()
            await g.unlock()
        rate = n / (time.perf_counter() - t)
        await client.aclose()
        return rate
    return asyncio.run(run()), redispy


if __name__ == "__main__":
    workers = int(sys.argv[1]) if len(sys.argv) > 1 else 8
    seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 5
    print(f"load average {os.getloadavg()[0]:.1f}")
    rb = handoffs(_redbell_worker, workers, seconds)
    print(f"redbell: {rb:.0f} hand-offs/s at {workers} workers")
    try:
        prl = handoffs(_prl_worker, workers, seconds)
        print(f"python-redis-lock: {prl:.0f} hand-offs/s ({rb / prl:.2f}x)")
    except ImportError:
        print("python-redis-lock not installed: row skipped")
    a, b = uncontended()
    print(f"uncontended lock+unlock: redbell {a:.0f}/s, redis-py Lock {b:.0f}/s ({a / b:.2f}x)")
