"""A Python process for the interoperation tests.

``worker.py hold KIND NAME LEASE_S``: acquire (mutex or fair), print
``held <fence>``, hold (renewed) until killed or a line arrives on stdin,
then release and print ``released``.
``worker.py wait KIND NAME``: print ``waiting`` once its first attempt
failed, acquire, print ``held <fence>``, release at once.
``worker.py act mutex NAME LEASE_S``: acquire, print ``held <fence>``, then
every 20 ms check ``guard.is_lost`` and, while it is not, act under the
lock (RPUSH ``py`` to ``redbell-test:{NAME}:log``); print ``lost`` once it is.
``worker.py sem NAME PERMITS N``: N times take a permit, INCR the gauge
``redbell-test:{NAME}:gauge``, check it is at most PERMITS, DECR, release;
print ``max=<highest> over=<holds that saw more> done=<n>``.
"""

import asyncio
import os
import sys

import redis.asyncio as aioredis

import redbell


async def main() -> None:
    mode, kind, name = sys.argv[1], sys.argv[2], sys.argv[3]
    client = await redbell.connect(os.environ["REDIS_URL"])
    if mode == "hold":
        lease = float(sys.argv[4])
        lock = client.fair_mutex(name, lease) if kind == "fair" else client.mutex(name, lease)
        g = await lock.lock()
        print("held", g.fence, flush=True)
        await asyncio.to_thread(sys.stdin.readline)
        await g.unlock()
        print("released", flush=True)
    elif mode == "wait":
        lock = client.fair_mutex(name) if kind == "fair" else client.mutex(name)
        g = await lock.try_lock()
        if g is None:
            print("waiting", flush=True)
            g = await lock.lock()
        print("held", g.fence, flush=True)
        await g.unlock()
    elif mode == "act":
        g = await client.mutex(name, float(sys.argv[4])).lock()
        print("held", g.fence, flush=True)
        r = aioredis.Redis.from_url(os.environ["REDIS_URL"])
        while True:
            await asyncio.sleep(0.02)
            if g.is_lost:
                print("lost", flush=True)
                break
            await r.rpush(f"redbell-test:{{{name}}}:log", "py")
        await r.aclose()
    elif mode == "sem":
        permits, n = int(sys.argv[3]), int(sys.argv[4])
        name = kind
        r = aioredis.Redis.from_url(os.environ["REDIS_URL"])
        gauge = f"redbell-test:{{{name}}}:gauge"
        sem = client.semaphore(name, permits)
        top = over = 0
        for _ in range(n):
            async with sem:
                now = await r.incr(gauge)
                top = max(top, now)
                over += now > permits
                await asyncio.sleep(0.002)
                await r.decr(gauge)
        print(f"max={top} over={over} done={n}", flush=True)
        await r.aclose()
    await client.aclose()


asyncio.run(main())
