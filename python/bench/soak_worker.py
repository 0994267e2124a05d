"""A Python worker of the soak (``redbell-bench soak``, kinds ``py`` and
``py-fair``): the same loop and the same JSON-lines records as the Rust
workers of ``bench/src/soak/worker.rs``, so one checker judges both.

Started by ``redbell-bench soak-worker --kind py ...``, which replaces
itself with this script (same pid: the soak's signals reach it), with the
same arguments::

    soak_worker.py --id ID --kind py|py-fair --lock NAME --log FILE
                   --stop-file FILE --hold-ms MS
                   [--sentinels URLS] [--cluster URLS] [--store-url URL]

``REDIS_URL`` is the library's server (the worker's proxy on ``single``).
Each critical section: log ``wait``; ``lock()``; log ``acquired`` with the
fence; write the fence to the fence-checked store on entry, hold, write
again on the way out; log ``hold``; ``unlock()``. Not part of the package.
"""

import argparse
import asyncio
import json
import os
import sys
import time

import redis.asyncio as aioredis

import redbell

LEASE = 1.5
"""The soak's lease (plan.rs ``LEASE``); renewed every third of it."""

STORE_WRITE = """
local max = tonumber(redis.call('GET', KEYS[1]) or '-1')
local fence = tonumber(ARGV[1])
if fence >= max then
  redis.call('SET', KEYS[1], ARGV[1])
  return 1
end
return 0
"""
"""The fence-checked store of worker_io.rs, byte for byte."""


def now_us() -> int:
    return time.time_ns() // 1000


class Log:
    """A worker's JSON-lines log: one ``write`` per record (O_APPEND), so a
    SIGKILL never leaves half a line."""

    def __init__(self, path: str, worker: str, kind: str, lock: str) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self.base = {"worker": worker, "kind": kind, "lock": lock}

    def put(self, event: str, seq: int, fence, start: int, end=None, outcome=None) -> None:
        rec = dict(self.base, event=event, seq=seq, start_us=start)
        if fence is not None:
            rec["fence"] = fence
        if end is not None:
            rec["end_us"] = end
        if outcome is not None:
            rec["outcome"] = outcome
        os.write(self.fd, (json.dumps(rec) + "\n").encode())


class Store:
    """The fence-checked store of one lock (``soak:{LOCK}:store``)."""

    def __init__(self, url: str, lock: str) -> None:
        self.r = aioredis.Redis.from_url(url, protocol=2, socket_timeout=2.0,
                                          socket_connect_timeout=2.0)
        self.script = self.r.register_script(STORE_WRITE)
        self.key = f"soak:{{{lock}}}:store"

    async def write(self, fence: int, log: Log, seq: int) -> str:
        start = now_us()
        try:
            outcome = "accepted" if await self.script(keys=[self.key], args=[fence]) == 1 \
                else "rejected"
        except Exception as e:
            outcome = f"error:{type(e).__name__}"
        log.put("write", seq, fence, start, now_us(), outcome)
        return outcome


async def connect(args) -> redbell.Client:
    if args.cluster:
        connect_cluster = getattr(redbell, "connect_cluster", None)
        if connect_cluster is None:
            sys.exit("soak_worker: this redbell package has no connect_cluster")
        return await connect_cluster(args.cluster.split(","))
    if args.sentinels:
        connect_sentinel = getattr(redbell, "connect_sentinel", None)
        if connect_sentinel is None:
            sys.exit("soak_worker: this redbell package has no connect_sentinel")
        return await connect_sentinel(args.sentinels.split(","), "mymaster")
    return await redbell.connect(os.environ["REDIS_URL"])


async def main() -> None:
    p = argparse.ArgumentParser()
    for a in ("--id", "--kind", "--lock", "--log", "--stop-file"):
        p.add_argument(a, required=True)
    p.add_argument("--hold-ms", type=int, default=5)
    p.add_argument("--sentinels")
    p.add_argument("--cluster")
    p.add_argument("--store-url")
    args = p.parse_args()
    client = await connect(args)
    handle = (client.fair_mutex(args.lock, LEASE) if args.kind == "py-fair"
              else client.mutex(args.lock, LEASE))
    store = Store(args.store_url or os.environ["REDIS_URL"], args.lock)
    log = Log(args.log, args.id, args.kind, args.lock)
    hold = args.hold_ms / 1000
    seq = 0
    while not os.path.exists(args.stop_file):
        seq += 1
        wait = now_us()
        log.put("wait", seq, None, wait)
        try:
            guard = await handle.lock()
        except Exception as e:  # logged by type: a non-redbell one is a finding
            log.put("error", seq, None, wait, now_us(), f"lock:{type(e).__name__}")
            await asyncio.sleep(0.05)
            continue
        got = now_us()
        fence = guard.fence
        log.put("acquired", seq, fence, wait, got)
        first = await store.write(fence, log, seq)
        await asyncio.sleep(hold)
        last = await store.write(fence, log, seq)
        log.put("hold", seq, fence, got, now_us(), last if first == "accepted" else first)
        try:
            await guard.unlock()
        except Exception as e:
            t = now_us()
            log.put("error", seq, fence, t, t, f"unlock:{type(e).__name__}")
        await asyncio.sleep(0.002)  # a turn for the others, as worker.rs
    await client.aclose()
    await store.r.aclose()


if __name__ == "__main__":
    asyncio.run(main())
