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

URL = os.environ["REDIS_URL"]
PKG = sys.argv[1] if len(sys.argv) > 1 else "redbell"

def worker(name, seconds, wid, q):
    rb = importlib.import_module(PKG)
    hub = importlib.import_module(PKG + "._hub"); mux = importlib.import_module(PKG + "._mux")
    ev = {"msg": [], "send": [], "reply": []}
    om = hub.Hub._message
    def _message(self, ch, payload):
        ev["msg"].append(time.monotonic()); return om(self, ch, payload)
    hub.Hub._message = _message
    os_ = mux.Mux.send
    def send(self, packed, sink):
        ev["send"].append(time.monotonic()); return os_(self, packed, sink)
    mux.Mux.send = send
    if hasattr(mux.Mux, "_reply"):
        orp = mux.Mux._reply
        def _reply(self, link, reply):
            ev["reply"].append(time.monotonic()); return orp(self, link, reply)
        mux.Mux._reply = _reply
    else:
        def wrap(sink):
            def s(r, e):
                ev["reply"].append(time.monotonic()); return sink(r, e)
            return s
        def send2(self, packed, sink):
            ev["send"].append(time.monotonic()); return os_(self, packed, wrap(sink))
        mux.Mux.send = send2
    async def run():
        client = await rb.connect(URL)
        r = redis.asyncio.Redis.from_url(URL, protocol=2); sr = redis.Redis.from_url(URL, protocol=2)
        m = client.mutex(name)
        spans = []
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            async with m:
                got = time.monotonic()
                prev = sr.getset(f"bench:{{{name}}}:last", wid)
                spans.append((got, time.monotonic()))
        await client.aclose(); await r.aclose()
        return spans
    spans = asyncio.run(run())
    q.put((wid, spans, ev))

def main():
    name = "trace-" + uuid.uuid4().hex[:8]
    q = mp.Queue()
    ps = [mp.Process(target=worker, args=(name, 4.0, i, q)) for i in range(8)]
    for p in ps: p.start()
    res = [q.get() for _ in ps]
    for p in ps: p.join()
    held = sorted((g, l, wid) for wid, spans, _ in res for g, l in spans)
    evs = {wid: ev for wid, _, ev in res}
    rows = []
    for a, b in zip(held, held[1:]):
        if a[2] == b[2]: continue
        ev = evs[b[2]]
        def last(kind, before, after):
            xs = ev[kind]; i = bisect.bisect_left(xs, before) - 1
            return xs[i] if i >= 0 and xs[i] > after else None
        rep = last("reply", b[0], a[1]); snd = last("send", rep or b[0], a[1]) if rep else None
        msg = last("msg", snd or b[0], a[1]) if snd else None
        hx = evs[a[2]]["send"]; j = bisect.bisect_left(hx, a[1])
        rel = hx[j] if j < len(hx) and hx[j] < b[0] else None
        if None in (rep, snd, msg, rel): rows.append(None); continue
        rows.append((rel - a[1], msg - rel, snd - msg, rep - snd, b[0] - rep, b[0] - a[1]))
    ok = [r for r in rows if r]
    print(PKG, "handoffs", len(rows), "with a wake message", len(ok))
    for i, lab in enumerate(["exit->release sent (H)", "release sent->msg read", "msg->attempt sent (W)", "attempt->reply read", "reply->got (W)", "total gap"]):
        xs = sorted(r[i] * 1e6 for r in ok)
        print(f"  {lab:22s} p50 {xs[len(xs)//2]:7.0f}  mean {statistics.mean(xs):7.0f}  p90 {xs[len(xs)*9//10]:7.0f} µs")
    nog = sorted((b[0]-a[1])*1e6 for (a, b), r in zip([(a, b) for a, b in zip(held, held[1:]) if a[2] != b[2]], rows) if r is None)
    if nog: print("  without a message: n", len(nog), "p50", nog[len(nog)//2], "mean", statistics.mean(nog))
main()
