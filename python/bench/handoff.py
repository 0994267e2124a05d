"""The Python client's bench: hand-offs per second between worker
processes on one lock, and the cost of an uncontended lock + unlock, for
redbell beside python-redis-lock and redis-py's own ``Lock``, in
interleaved rounds against one Redis (medians).

Usage (``make bench-python`` runs it; REDIS_URL set, a private server: it
runs CONFIG RESETSTAT)::

    python python/bench/handoff.py [--workers 8] [--seconds 5] [--rounds 5]
                                   [--report docs/performance.md]

A hand-off is an acquisition by a worker other than the previous holder:
each holder GETSETs the lock's last-holder key inside the lock, so the rate
counts only real transfers between processes (a polling releaser that
re-takes its own lock hands nothing to anyone). ``--report FILE`` writes
the tables as the section "Python client" of FILE, replacing that section
if present (``redbell-bench bench --report`` keeps it when it rewrites the
rest of the page). Asserts nothing: its figures depend on the machine.
"""

import argparse
import asyncio
import datetime
import functools
import importlib
import multiprocessing as mp
import os
import platform
import statistics
import sys
import time
import uuid
from importlib import metadata

import redis

URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379")
BEGIN = "<!-- python-bench:begin -->"
END = "<!-- python-bench:end -->"


def _last(name: str) -> str:
    return f"bench:{{{name}}}:last"


# -- hand-off workers (one process each) -------------------------------------

ASYNC_HOLD = False
"""Whether the asyncio arm's ``GETSET`` goes through redis-py's asyncio
client (``--async-hold``) rather than the synchronous one every other arm
uses."""


def _redbell_worker(name: str, seconds: float, wid: int, q, pkg: str = "redbell") -> None:
    redbell = importlib.import_module(pkg)

    async def run() -> "tuple[int, int]":
        client = await redbell.connect(URL)
        ar = redis.asyncio.Redis.from_url(URL, protocol=2)
        r = redis.Redis.from_url(URL, protocol=2)
        m = client.mutex(name)
        n = total = 0
        cpu = time.process_time()
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            async with m:
                got = time.monotonic()
                prev = await ar.getset(_last(name), wid) if ASYNC_HOLD \
                    else r.getset(_last(name), wid)
                n += prev is not None and int(prev) != wid
                total += 1
                spans.append((got, time.monotonic()))
        cpu = time.process_time() - cpu
        await client.aclose()
        await ar.aclose()
        r.close()
        return n, total, cpu, spans
    spans: list = []
    q.put(asyncio.run(run()))


def _redbell_sync_worker(name: str, seconds: float, wid: int, q, pkg: str = "redbell") -> None:
    sync = importlib.import_module(pkg + ".sync")
    r = redis.Redis.from_url(URL, protocol=2)
    n = total = 0
    spans: list = []
    with sync.connect(URL) as client:
        m = client.mutex(name)
        cpu = time.process_time()
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            with m:
                got = time.monotonic()
                prev = r.getset(_last(name), wid)
                n += prev is not None and int(prev) != wid
                total += 1
                spans.append((got, time.monotonic()))
        cpu = time.process_time() - cpu
    q.put((n, total, cpu, spans))


def _prl_worker(name: str, seconds: float, wid: int, q) -> None:
    import redis_lock
    r = redis.Redis.from_url(URL, protocol=2)
    n = total = 0
    spans: list = []
    cpu = time.process_time()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        with redis_lock.Lock(r, name, expire=30):
            got = time.monotonic()
            prev = r.getset(_last(name), wid)
            n += prev is not None and int(prev) != wid
            total += 1
            spans.append((got, time.monotonic()))
    q.put((n, total, time.process_time() - cpu, spans))


def _redispy_worker(name: str, seconds: float, wid: int, q) -> None:
    r = redis.Redis.from_url(URL, protocol=2)
    n = total = 0
    spans: list = []
    cpu = time.process_time()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        with r.lock(name, timeout=30):  # blocking acquire: polls every 0.1 s
            got = time.monotonic()
            prev = r.getset(_last(name), wid)
            n += prev is not None and int(prev) != wid
            total += 1
            spans.append((got, time.monotonic()))
    q.put((n, total, time.process_time() - cpu, spans))


HANDOFF = [
    ("redbell", _redbell_worker),
    ("redbell (sync face)", _redbell_sync_worker),
    ("python-redis-lock", _prl_worker),
    ("redis-py Lock", _redispy_worker),
]

_OWN = ("getset", "config", "info", "hello", "client")
"""Commands of the bench itself (and of connection set-up), not counted."""


def handoffs(worker, workers: int, seconds: float) -> dict:
    r = redis.Redis.from_url(URL, protocol=2)
    name = "bench-py-" + uuid.uuid4().hex[:8]
    q = mp.Queue()
    ps = [mp.Process(target=worker, args=(name, seconds, i, q)) for i in range(workers)]
    r.config_resetstat()
    cpu0 = (lambda c: c["used_cpu_sys"] + c["used_cpu_user"])(r.info("cpu"))
    for p in ps:
        p.start()
    results = [q.get() for _ in ps]
    for p in ps:
        p.join()
    server_cpu = r.info("cpu")
    stats = r.info("commandstats")
    cmds = scripts = 0
    for k, v in stats.items():
        cmd = k[len("cmdstat_"):]
        if not cmd.split("|")[0] in _OWN:
            cmds += v["calls"]
        if cmd in ("evalsha", "eval", "fcall"):
            scripts += v["calls"]
    for key in r.scan_iter(f"*{name}*"):
        r.delete(key)
    n = sum(x[0] for x in results)
    # The gap of each hand-off: from the holder's last statement inside the
    # lock to the next holder's first (CLOCK_MONOTONIC: one clock for all).
    held = sorted((got, left, i) for i, x in enumerate(results) for got, left in x[3])
    gaps = sorted(b[0] - a[1] for a, b in zip(held, held[1:]) if a[2] != b[2]) or [0.0]
    holds = [left - got for got, left, _ in held] or [0.0]
    return {"hold50": statistics.median(holds) * 1e6,
            "gap50": gaps[len(gaps) // 2] * 1e6, "gap99": gaps[len(gaps) * 99 // 100] * 1e6,
            "gapmean": statistics.mean(gaps) * 1e6, "rate": n / seconds,
            "all": sum(x[1] for x in results) / seconds,
            "cmds": cmds / max(n, 1), "scripts": scripts / max(n, 1),
            "cpu": sum(x[2] for x in results) / max(n, 1) * 1e6,
            "redis_cpu": (server_cpu["used_cpu_sys"] + server_cpu["used_cpu_user"]
                          - cpu0) / max(n, 1) * 1e6}


# -- uncontended lock + unlock (this process) ---------------------------------

def _per(n: int, t: float, c: float) -> "tuple[float, float]":
    """Operations/s since perf_counter ``t``, and this process's CPU µs
    per operation since process_time ``c`` (the sync face's loop thread
    included)."""
    return n / (time.perf_counter() - t), (time.process_time() - c) / n * 1e6


def _unc_redbell(n: int, pkg: str = "redbell") -> "tuple[float, float]":
    redbell = importlib.import_module(pkg)

    async def run() -> "tuple[float, float]":
        client = await redbell.connect(URL)
        m = client.mutex("bench-py-unc-" + uuid.uuid4().hex[:8])
        t, c = time.perf_counter(), time.process_time()
        for _ in range(n):
            g = await m.lock()
            await g.unlock()
        rate = _per(n, t, c)
        await client.aclose()
        return rate
    return asyncio.run(run())


def _unc_redbell_sync(n: int, pkg: str = "redbell") -> "tuple[float, float]":
    sync = importlib.import_module(pkg + ".sync")
    with sync.connect(URL) as client:
        m = client.mutex("bench-py-unc-" + uuid.uuid4().hex[:8])
        t, c = time.perf_counter(), time.process_time()
        for _ in range(n):
            m.lock().unlock()
        return _per(n, t, c)


def _unc_redispy(n: int) -> "tuple[float, float]":
    r = redis.Redis.from_url(URL, protocol=2)
    lock = r.lock("bench-py-unc-" + uuid.uuid4().hex[:8], timeout=30)
    t, c = time.perf_counter(), time.process_time()
    for _ in range(n):
        lock.acquire()
        lock.release()
    return _per(n, t, c)


def _unc_redispy_async(n: int) -> "tuple[float, float]":
    async def run() -> "tuple[float, float]":
        r = redis.asyncio.Redis.from_url(URL, protocol=2)
        lock = r.lock("bench-py-unc-" + uuid.uuid4().hex[:8], timeout=30)
        t, c = time.perf_counter(), time.process_time()
        for _ in range(n):
            await lock.acquire()
            await lock.release()
        rate = _per(n, t, c)
        await r.aclose()
        return rate
    return asyncio.run(run())


def _unc_prl(n: int) -> "tuple[float, float]":
    import redis_lock
    r = redis.Redis.from_url(URL, protocol=2)
    lock = redis_lock.Lock(r, "bench-py-unc-" + uuid.uuid4().hex[:8], expire=30)
    t, c = time.perf_counter(), time.process_time()
    for _ in range(n):
        lock.acquire()
        lock.release()
    return _per(n, t, c)


UNCONTENDED = [
    ("redbell", _unc_redbell),
    ("redbell (sync face)", _unc_redbell_sync),
    ("redis-py Lock", _unc_redispy),
    ("redis-py asyncio Lock", _unc_redispy_async),
    ("python-redis-lock", _unc_prl),
]


# -- floors (roundtrip.py) -----------------------------------------------------

FLOOR_N = 1000
"""Round trips per floor measurement."""
MUX = "redbell's multiplexed connection"


def floors() -> dict:
    """roundtrip.py's floors: name -> (CPU µs, wall µs) per step."""
    import roundtrip  # beside this file
    out = {}
    for k, f in roundtrip.WAYS:
        cpu, wall = f(FLOOR_N)
        out[k] = (cpu / FLOOR_N * 1e6, wall / FLOOR_N * 1e6)
    for k, side in roundtrip.WAKES:
        out[k] = roundtrip._pingpong(side, FLOOR_N // 2)
    return out


# -- the report ----------------------------------------------------------------

def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def _us(v: list, key: str) -> str:
    """The median over runs of ``key`` (µs), as µs or ms."""
    x = statistics.median(r[key] for r in v)
    return f"{x:.0f} µs" if x < 1000 else f"{x / 1000:.1f} ms"


def _runs(xs: "list[float]") -> str:
    return ", ".join(f"{x:.0f}" for x in xs)


def section(args, hand: dict, unc: dict, floor: dict,
            loads: "tuple[float, float]") -> str:
    med = {k: statistics.median(x["rate"] for x in v) for k, v in hand.items()}
    umed = {k: statistics.median(x[0] for x in v) for k, v in unc.items()}
    ucpu = {k: statistics.median(x[1] for x in v) for k, v in unc.items()}
    r = redis.Redis.from_url(URL, protocol=2)
    redis_version = r.info("server").get("redis_version", "?")
    out = [BEGIN, "", "## Python client", ""]
    out.append(
        f"Run {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC on "
        f"{os.cpu_count()} cores (load average {loads[0]:.1f} before, {loads[1]:.1f} after), "
        f"Redis {redis_version}, Python {platform.python_version()}, redis-py "
        f"{_version('redis')}, python-redis-lock {_version('python-redis-lock')}. Generated "
        f"by `make bench-python` alone (`python/bench/handoff.py --report`; `make bench` keeps "
        f"this section as it is). This run: `handoff.py --workers {args.workers} --seconds "
        f"{args.seconds:g} --rounds {args.rounds}`.")
    out.append("")
    out.append(
        f"**Hand-off on one lock.** {args.workers} worker processes, each with its own client, "
        f"loop lock → `GETSET` of the last holder's id → unlock for {args.seconds:g} s; the "
        f"libraries take turns, {args.rounds} rounds (medians; each run listed). *hand-offs/s* "
        f"counts acquisitions whose previous holder was another worker. *commands* = every "
        f"Redis command per hand-off (`INFO commandstats`, those inside Lua scripts included, "
        f"the bench's `GETSET` excluded); *script calls* = `EVALSHA`/`EVAL` per hand-off; "
        f"*gap* = from a holder's last statement inside the lock (unlock about to be sent) "
        f"to the next holder's first, for hand-offs to another worker (p50, mean, p99; "
        f"the mean is what bounds hand-offs/s); *hold* = the median time inside the lock "
        f"(the `GETSET` round trip, "
        + ("through redis-py's asyncio client in the asyncio arms, its synchronous one in "
           "the others" if args.async_hold else
           "through redis-py's synchronous client in every arm, the asyncio ones included "
           "(it blocks their loop for one round trip), so that the work inside the lock "
           "costs the same in every row and the rows differ only by their lock")
        + "); "
        f"*client CPU* = the CPU time of all {args.workers} worker processes over their loops "
        f"(`time.process_time()`) per hand-off; *Redis CPU* = `used_cpu_sys + used_cpu_user` "
        f"per hand-off. On a loaded machine the workers share what CPU is left, so client "
        f"CPU per hand-off bounds the rate. python-redis-lock waits on `BLPOP`; redis-py's "
        f"`Lock` polls every 0.1 s.")
    out.append("")
    out.append("| library | hand-offs/s to another worker (runs) | × python-redis-lock "
               "| all acquisitions/s | commands / hand-off | script calls / hand-off "
               "| gap p50 / mean / p99 | hold | client CPU / hand-off | Redis CPU / hand-off |")
    out.append("|---|---|---|---|---|---|---|---|---|---|")
    base = med.get("python-redis-lock")
    for k, v in hand.items():
        ratio = f"{med[k] / base:.2f}×" if base else "–"
        out.append(
            f"| {k} | **{med[k]:.0f}** ({_runs([x['rate'] for x in v])}) | {ratio} "
            f"| {statistics.median(x['all'] for x in v):.0f} "
            f"| {statistics.median(x['cmds'] for x in v):.1f} "
            f"| {statistics.median(x['scripts'] for x in v):.2f} "
            f"| {_us(v, 'gap50')} / {_us(v, 'gapmean')} / {_us(v, 'gap99')} "
            f"| {_us(v, 'hold50')} "
            f"| {statistics.median(x['cpu'] for x in v):.0f} µs "
            f"| {statistics.median(x['redis_cpu'] for x in v):.0f} µs |")
    out.append("")
    out.append(
        f"**Uncontended lock + unlock.** One process, {args.uncontended} sequential lock + "
        f"unlock on a free lock, the libraries in turn (order rotated each round), "
        f"{args.rounds} rounds (medians). *CPU* = this process's CPU time per lock+unlock "
        f"(`time.process_time()`), which the machine's load inflates less than the rate.")
    out.append("")
    out.append("| library | lock+unlock/s (runs) | × redis-py Lock | CPU / lock+unlock |")
    out.append("|---|---|---|---|")
    ubase = umed.get("redis-py Lock")
    for k, v in unc.items():
        ratio = f"{umed[k] / ubase:.2f}×" if ubase else "–"
        out.append(f"| {k} | **{umed[k]:.0f}** ({_runs([x[0] for x in v])}) | {ratio} "
                   f"| {ucpu[k]:.0f} µs |")
    fmed = {k: (statistics.median(x[0] for x in v), statistics.median(x[1] for x in v))
            for k, v in floor.items()}
    if fmed:
        out.append("")
        out.append(
            f"**Floors.** What one step costs on this machine during this run, whatever the "
            f"library (`python/bench/roundtrip.py`, {FLOOR_N} steps a run, once a round, "
            f"medians): a sequential `PING` round trip per I/O path, one process; and a "
            f"wake-up of another process through Redis, two processes waking each other in "
            f"turn (`LPUSH` and `BLPOP` in one write → `BLPOP` returns, redis-py's sync "
            f"client: python-redis-lock's wake-up; `PUBLISH` → an asyncio subscriber, "
            f"redbell's). On its critical path a "
            f"hand-off costs, in either library, one wake-up of the next holder and one round "
            f"trip of its attempt (redbell: the wake-up message, then the acquire script that "
            f"takes its reservation; python-redis-lock: `BLPOP` returns, then `SET NX`); the "
            f"Redis scripts and the releaser's next attempt run beside it on the same cores. "
            f"`python/bench/handoff_trace.py` splits redbell's gap by step and process.")
        out.append("")
        out.append("| step | CPU / step | wall / step |")
        out.append("|---|---|---|")
        for k, (c, w) in fmed.items():
            out.append(f"| {k} | {c:.0f} µs | {w:.0f} µs |")
    out.append("")
    out.append("Goals of the Python client (reported, not asserted):")
    out.append("")
    if base and "redbell" in med:
        ok = med["redbell"] >= 1.5 * base
        line = (f"- hand-offs/s at {args.workers} workers ≥ 1.5× python-redis-lock's: "
                f"{med['redbell']:.0f} vs {base:.0f} = {med['redbell'] / base:.2f}× — "
                f"{'met' if ok else 'NOT met'}")
        if not ok:
            cpu = {k: statistics.median(x["cpu"] + x["redis_cpu"] for x in hand[k])
                   for k in ("redbell", "python-redis-lock") if k in hand}
            if len(cpu) == 2:
                line += (f"; client + Redis CPU per hand-off {cpu['redbell']:.0f} vs "
                         f"{cpu['python-redis-lock']:.0f} µs "
                         f"({cpu['python-redis-lock'] / cpu['redbell']:.2f}×)")
            wake = ("PUBLISH → subscriber (asyncio Protocol)", "LPUSH → BLPOP (redis-py sync)")
            if all(k in fmed for k in wake):
                gaps = [statistics.median(x["gap50"] for x in hand[k])
                        for k in ("redbell", "python-redis-lock")]
                line += (f"; gap p50 {gaps[0]:.0f} vs {gaps[1]:.0f} µs, while the wake-up "
                         f"floor is {fmed[wake[0]][1]:.0f} vs {fmed[wake[1]][1]:.0f} µs and "
                         f"the attempt's round trip floor "
                         f"{fmed[MUX][1]:.0f}"
                         f" vs {fmed['redis-py sync client'][1]:.0f} µs: the floors of "
                         f"the steps do not bound it; the rest of the gap is the scripts' "
                         f"work in Redis and waiting for a core (`handoff_trace.py`)")
        out.append(line)
    if ubase and "redbell" in umed:
        ok = umed["redbell"] >= 0.8 * ubase
        out.append(f"- uncontended lock+unlock ≥ 0.8× redis-py `Lock`: {umed['redbell']:.0f} vs "
                   f"{ubase:.0f}/s = {umed['redbell'] / ubase:.2f}× — "
                   f"{'met' if ok else 'NOT met'}; CPU per lock+unlock "
                   f"{ucpu['redbell']:.0f} vs {ucpu['redis-py Lock']:.0f} µs")
    out += ["", END, ""]
    return "\n".join(out)


def write_report(path: str, text: str) -> None:
    """Replace the section in ``path`` (or append it)."""
    try:
        with open(path) as f:
            page = f.read()
    except FileNotFoundError:
        page = ""
    if BEGIN in page and END in page:
        head, rest = page.split(BEGIN, 1)
        tail = rest.split(END, 1)[1].lstrip("\n")
        page = head + text + tail
    else:
        page = page.rstrip("\n") + ("\n\n" if page else "") + text
    with open(path, "w") as f:
        f.write(page)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workers", type=int, default=8)
    p.add_argument("--seconds", type=float, default=5)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--uncontended", type=int, default=2000, help="lock+unlock per run")
    p.add_argument("--only", help="comma-separated library names (as in the tables)")
    p.add_argument("--report", help="write the section into this Markdown file")
    p.add_argument("--baseline", metavar="DIR",
                   help="also run an older copy of the package, DIR/redbell_base (e.g. "
                        "`git archive REV python/redbell`, the directory renamed), as the "
                        "arms 'redbell (baseline)', for before/after figures of one run")
    p.add_argument("--no-floors", action="store_true", help="skip roundtrip.py's floors")
    p.add_argument("--async-hold", action="store_true",
                   help="the asyncio arms' GETSET through redis-py's asyncio client")
    args = p.parse_args()
    global ASYNC_HOLD
    ASYNC_HOLD = args.async_hold
    if args.baseline:
        sys.path.insert(0, args.baseline)
        HANDOFF.insert(1, ("redbell (baseline)",
                           functools.partial(_redbell_worker, pkg="redbell_base")))
        UNCONTENDED.insert(1, ("redbell (baseline)",
                               functools.partial(_unc_redbell, pkg="redbell_base")))
    only = set(args.only.split(",")) if args.only else None
    pick = lambda rows: [(k, f) for k, f in rows if only is None or k in only]  # noqa: E731
    try:
        import redis_lock  # noqa: F401
    except ImportError:
        sys.exit("python-redis-lock is not installed: pip install python-redis-lock")
    loads0 = os.getloadavg()[0]
    hand: dict = {k: [] for k, _ in pick(HANDOFF)}
    unc: dict = {k: [] for k, _ in pick(UNCONTENDED)}
    floor: dict = {}
    for i in range(args.rounds):
        if not args.no_floors:
            for k, v in floors().items():
                floor.setdefault(k, []).append(v)
        rot = pick(HANDOFF)[i % len(pick(HANDOFF)):] + pick(HANDOFF)[:i % len(pick(HANDOFF))]
        for k, worker in rot:
            x = handoffs(worker, args.workers, args.seconds)
            hand[k].append(x)
            print(f"round {i + 1}: {k}: {x['rate']:.0f} hand-offs/s, gap p50 "
                  f"{x['gap50']:.0f} mean {x['gapmean']:.0f} p99 {x['gap99']:.0f} µs, hold "
                  f"{x['hold50']:.0f} µs, "
                  f"{x['cpu']:.0f} µs client CPU / hand-off", file=sys.stderr)
        rows = pick(UNCONTENDED)
        for k, f in rows[i % len(rows):] + rows[:i % len(rows)]:
            unc[k].append(f(args.uncontended))
            print(f"round {i + 1}: uncontended {k}: {unc[k][-1][0]:.0f}/s, "
                  f"{unc[k][-1][1]:.0f} µs CPU", file=sys.stderr)
    text = section(args, hand, unc, floor, (loads0, os.getloadavg()[0]))
    print(text)
    if args.report:
        write_report(args.report, text)
        print(f"handoff.py: wrote the Python section of {args.report}", file=sys.stderr)


if __name__ == "__main__":
    main()
