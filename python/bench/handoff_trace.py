"""Where a hand-off's gap goes, step by step: 8 worker processes loop lock →
GETSET → unlock on one lock (as handoff.py's redbell arm does), with the
client's hub and multiplexed connection instrumented (CLOCK_MONOTONIC, one
clock for all processes). For each hand-off to another worker: the
previous holder's exit → its release written → the wake message read by
the woken process → its attempt written → the attempt's reply read → the
new holder's first statement (p50, mean, p90 of each step).

Usage (REDIS_URL set; PKG: the package to trace, e.g. an older copy
imported as redbell_base through PYTHONPATH)::

    python python/bench/handoff_trace.py [PKG]
"""
import asyncio
import bisect
import importlib
import multiprocessing as mp
import os
import statistics
import sys
import time
import uuid

import redis

URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379")
WORKERS = 8
SECONDS = 4.0
STEPS = ["exit → release written (holder)", "release written → wake-up read",
         "wake-up read → attempt written", "attempt written → reply read",
         "reply read → holding (woken)", "whole gap"]


def _instrument(pkg: str, ev: dict) -> None:
    """Record when the hub reads a message and the mux writes a call or
    reads a reply (the package's own functions, wrapped)."""
    hub = importlib.import_module(pkg + "._hub")
    mux = importlib.import_module(pkg + "._mux")
    message, send = hub.Hub._message, mux.Mux.send

    def _message(self, ch, payload):
        ev["msg"].append(time.monotonic())
        return message(self, ch, payload)

    def _send(self, packed, sink):
        ev["send"].append(time.monotonic())

        def timed(reply, err):
            ev["reply"].append(time.monotonic())
            return sink(reply, err)
        return send(self, packed, timed)
    hub.Hub._message = _message
    mux.Mux.send = _send


def _worker(pkg: str, name: str, wid: int, q) -> None:
    ev: dict = {"msg": [], "send": [], "reply": []}
    _instrument(pkg, ev)
    redbell = importlib.import_module(pkg)
    r = redis.Redis.from_url(URL, protocol=2)

    async def run() -> list:
        client = await redbell.connect(URL)
        m = client.mutex(name)
        spans = []
        end = time.monotonic() + SECONDS
        while time.monotonic() < end:
            async with m:
                got = time.monotonic()
                r.getset(f"bench:{{{name}}}:last", wid)
                spans.append((got, time.monotonic()))
        await client.aclose()
        return spans
    q.put((wid, asyncio.run(run()), ev))


def _last(xs: list, before: float, after: float):
    """The latest of the sorted ``xs`` in (after, before), or None."""
    i = bisect.bisect_left(xs, before) - 1
    return xs[i] if i >= 0 and xs[i] > after else None


def main() -> None:
    pkg = sys.argv[1] if len(sys.argv) > 1 else "redbell"
    name = "bench-trace-" + uuid.uuid4().hex[:8]
    q = mp.Queue()
    ps = [mp.Process(target=_worker, args=(pkg, name, i, q)) for i in range(WORKERS)]
    for p in ps:
        p.start()
    res = [q.get() for _ in ps]
    for p in ps:
        p.join()
    held = sorted((got, left, wid) for wid, spans, _ in res for got, left in spans)
    evs = {wid: ev for wid, _, ev in res}
    rows, untraced = [], 0
    for (_, left, prev), (got, _, wid) in zip(held, held[1:]):
        if prev == wid:
            continue
        ev = evs[wid]
        reply = _last(ev["reply"], got, left)
        sent = reply and _last(ev["send"], reply, left)
        msg = sent and _last(ev["msg"], sent, left)
        out = evs[prev]["send"]
        j = bisect.bisect_left(out, left)
        release = out[j] if j < len(out) and out[j] < got else None
        if not (reply and sent and msg and release):
            untraced += 1  # no wake-up message (e.g. a free lock): not split
            continue
        rows.append((release - left, msg - release, sent - msg, reply - sent, got - reply,
                     got - left))
    print(f"{pkg}: {len(rows) + untraced} hand-offs to another worker in {SECONDS:g} s, "
          f"{len(rows)} split by step ({untraced} without a wake-up message)")
    for i, step in enumerate(STEPS):
        xs = sorted(r[i] * 1e6 for r in rows) or [0.0]
        print(f"  {step:34s} p50 {xs[len(xs) // 2]:6.0f}  mean {statistics.mean(xs):6.0f}  "
              f"p90 {xs[len(xs) * 9 // 10]:6.0f} µs")


if __name__ == "__main__":
    main()
