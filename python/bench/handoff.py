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

def _redbell_worker(name: str, seconds: float, wid: int, q) -> None:
    import redbell

    async def run() -> "tuple[int, int]":
        client = await redbell.connect(URL)
        r = redis.asyncio.Redis.from_url(URL, protocol=2)
        m = client.mutex(name)
        n = total = 0
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            async with m:
                prev = await r.getset(_last(name), wid)
                n += prev is not None and int(prev) != wid
                total += 1
        await client.aclose()
        await r.aclose()
        return n, total
    q.put(asyncio.run(run()))


def _redbell_sync_worker(name: str, seconds: float, wid: int, q) -> None:
    from redbell import sync
    r = redis.Redis.from_url(URL, protocol=2)
    n = total = 0
    with sync.connect(URL) as client:
        m = client.mutex(name)
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            with m:
                prev = r.getset(_last(name), wid)
                n += prev is not None and int(prev) != wid
                total += 1
    q.put((n, total))


def _prl_worker(name: str, seconds: float, wid: int, q) -> None:
    import redis_lock
    r = redis.Redis.from_url(URL, protocol=2)
    n = total = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        with redis_lock.Lock(r, name, expire=30):
            prev = r.getset(_last(name), wid)
            n += prev is not None and int(prev) != wid
            total += 1
    q.put((n, total))


def _redispy_worker(name: str, seconds: float, wid: int, q) -> None:
    r = redis.Redis.from_url(URL, protocol=2)
    n = total = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        with r.lock(name, timeout=30):  # blocking acquire: polls every 0.1 s
            prev = r.getset(_last(name), wid)
            n += prev is not None and int(prev) != wid
            total += 1
    q.put((n, total))


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
    for p in ps:
        p.start()
    results = [q.get() for _ in ps]
    for p in ps:
        p.join()
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
    return {"rate": n / seconds, "all": sum(x[1] for x in results) / seconds,
            "cmds": cmds / max(n, 1), "scripts": scripts / max(n, 1)}


# -- uncontended lock + unlock (this process) ---------------------------------

def _unc_redbell(n: int) -> float:
    import redbell

    async def run() -> float:
        client = await redbell.connect(URL)
        m = client.mutex("bench-py-unc-" + uuid.uuid4().hex[:8])
        t = time.perf_counter()
        for _ in range(n):
            g = await m.lock()
            await g.unlock()
        rate = n / (time.perf_counter() - t)
        await client.aclose()
        return rate
    return asyncio.run(run())


def _unc_redbell_sync(n: int) -> float:
    from redbell import sync
    with sync.connect(URL) as client:
        m = client.mutex("bench-py-unc-" + uuid.uuid4().hex[:8])
        t = time.perf_counter()
        for _ in range(n):
            m.lock().unlock()
        return n / (time.perf_counter() - t)


def _unc_redispy(n: int) -> float:
    r = redis.Redis.from_url(URL, protocol=2)
    lock = r.lock("bench-py-unc-" + uuid.uuid4().hex[:8], timeout=30)
    t = time.perf_counter()
    for _ in range(n):
        lock.acquire()
        lock.release()
    return n / (time.perf_counter() - t)


def _unc_redispy_async(n: int) -> float:
    async def run() -> float:
        r = redis.asyncio.Redis.from_url(URL, protocol=2)
        lock = r.lock("bench-py-unc-" + uuid.uuid4().hex[:8], timeout=30)
        t = time.perf_counter()
        for _ in range(n):
            await lock.acquire()
            await lock.release()
        rate = n / (time.perf_counter() - t)
        await r.aclose()
        return rate
    return asyncio.run(run())


def _unc_prl(n: int) -> float:
    import redis_lock
    r = redis.Redis.from_url(URL, protocol=2)
    lock = redis_lock.Lock(r, "bench-py-unc-" + uuid.uuid4().hex[:8], expire=30)
    t = time.perf_counter()
    for _ in range(n):
        lock.acquire()
        lock.release()
    return n / (time.perf_counter() - t)


# -- the serial floor: the hand-off loop in one process, nobody waiting -------

def _floor_redbell(n: int) -> float:
    import redbell

    async def run() -> float:
        client = await redbell.connect(URL)
        r = redis.asyncio.Redis.from_url(URL, protocol=2)
        name = "bench-py-floor-" + uuid.uuid4().hex[:8]
        m = client.mutex(name)
        t = time.perf_counter()
        for _ in range(n):
            async with m:
                await r.getset(_last(name), 0)
        rate = n / (time.perf_counter() - t)
        await r.delete(_last(name))
        await client.aclose()
        await r.aclose()
        return rate
    return asyncio.run(run())


def _floor_prl(n: int) -> float:
    import redis_lock
    r = redis.Redis.from_url(URL, protocol=2)
    name = "bench-py-floor-" + uuid.uuid4().hex[:8]
    lock = redis_lock.Lock(r, name, expire=30)
    t = time.perf_counter()
    for _ in range(n):
        with lock:
            r.getset(_last(name), 0)
    rate = n / (time.perf_counter() - t)
    r.delete(_last(name))
    return rate


FLOOR = [
    ("redbell", _floor_redbell),
    ("python-redis-lock", _floor_prl),
]
"""Each worker's loop (lock → GETSET → unlock) run serially in one process
with no other worker: the same calls as a hand-off without the wake-up and
the switch to another process, so a hand-off rate cannot be much above it."""

UNCONTENDED = [
    ("redbell", _unc_redbell),
    ("redbell (sync face)", _unc_redbell_sync),
    ("redis-py Lock", _unc_redispy),
    ("redis-py asyncio Lock", _unc_redispy_async),
    ("python-redis-lock", _unc_prl),
]


# -- the report ----------------------------------------------------------------

def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def _runs(xs: "list[float]") -> str:
    return ", ".join(f"{x:.0f}" for x in xs)


def section(args, hand: dict, unc: dict, floor: dict, loads: "tuple[float, float]") -> str:
    med = {k: statistics.median(x["rate"] for x in v) for k, v in hand.items()}
    umed = {k: statistics.median(v) for k, v in unc.items()}
    fmed = {k: statistics.median(v) for k, v in floor.items()}
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
        f"the bench's `GETSET` excluded); *script calls* = `EVALSHA`/`EVAL` per hand-off. "
        f"python-redis-lock waits on `BLPOP`; redis-py's `Lock` polls every 0.1 s.")
    out.append("")
    out.append("| library | hand-offs/s to another worker (runs) | × python-redis-lock "
               "| all acquisitions/s | commands / hand-off | script calls / hand-off |")
    out.append("|---|---|---|---|---|---|")
    base = med.get("python-redis-lock")
    for k, v in hand.items():
        ratio = f"{med[k] / base:.2f}×" if base else "–"
        out.append(
            f"| {k} | **{med[k]:.0f}** ({_runs([x['rate'] for x in v])}) | {ratio} "
            f"| {statistics.median(x['all'] for x in v):.0f} "
            f"| {statistics.median(x['cmds'] for x in v):.1f} "
            f"| {statistics.median(x['scripts'] for x in v):.2f} |")
    out.append("")
    out.append(
        f"**Serial floor.** Each worker's loop (lock → `GETSET` → unlock) serially in one "
        f"process with nobody else: the same calls as a hand-off, without the wake-up and the "
        f"switch to another process, {args.uncontended} iterations, {args.rounds} rounds "
        f"(medians). A hand-off costs at least these three round trips, so its rate stays "
        f"below the floor.")
    out.append("")
    out.append("| library | loop iterations/s (runs) | its hand-offs/s as a share of it |")
    out.append("|---|---|---|")
    for k, v in floor.items():
        share = f"{med[k] / fmed[k]:.0%}" if k in med and fmed[k] else "–"
        out.append(f"| {k} | **{fmed[k]:.0f}** ({_runs(v)}) | {share} |")
    out.append("")
    out.append(
        f"**Uncontended lock + unlock.** One process, {args.uncontended} sequential lock + "
        f"unlock on a free lock, each library in turn, {args.rounds} rounds (medians).")
    out.append("")
    out.append("| library | lock+unlock/s (runs) | × redis-py Lock |")
    out.append("|---|---|---|")
    ubase = umed.get("redis-py Lock")
    for k, v in unc.items():
        ratio = f"{umed[k] / ubase:.2f}×" if ubase else "–"
        out.append(f"| {k} | **{umed[k]:.0f}** ({_runs(v)}) | {ratio} |")
    out.append("")
    out.append("Goals of the Python client (reported, not asserted):")
    out.append("")
    if base and "redbell" in med:
        ok = med["redbell"] >= 1.5 * base
        line = (f"- hand-offs/s at {args.workers} workers ≥ 1.5× python-redis-lock's: "
                f"{med['redbell']:.0f} vs {base:.0f} = {med['redbell'] / base:.2f}× — "
                f"{'met' if ok else 'NOT met'}")
        if not ok and "redbell" in fmed:
            line += (f"; 1.5× is {1.5 * base:.0f}/s, {1.5 * base / fmed['redbell']:.0%} of "
                     f"redbell's serial floor ({fmed['redbell']:.0f}/s), while "
                     f"python-redis-lock's hand-offs already run at "
                     f"{base / fmed.get('python-redis-lock', base):.0%} of its own")
        out.append(line)
    if ubase and "redbell" in umed:
        ok = umed["redbell"] >= 0.8 * ubase
        out.append(f"- uncontended lock+unlock ≥ 0.8× redis-py `Lock`: {umed['redbell']:.0f} vs "
                   f"{ubase:.0f}/s = {umed['redbell'] / ubase:.2f}× — "
                   f"{'met' if ok else 'NOT met'}")
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
    args = p.parse_args()
    only = set(args.only.split(",")) if args.only else None
    pick = lambda rows: [(k, f) for k, f in rows if only is None or k in only]  # noqa: E731
    try:
        import redis_lock  # noqa: F401
    except ImportError:
        sys.exit("python-redis-lock is not installed: pip install python-redis-lock")
    loads0 = os.getloadavg()[0]
    hand: dict = {k: [] for k, _ in pick(HANDOFF)}
    unc: dict = {k: [] for k, _ in pick(UNCONTENDED)}
    floor: dict = {k: [] for k, _ in pick(FLOOR)}
    for i in range(args.rounds):
        rot = pick(HANDOFF)[i % len(pick(HANDOFF)):] + pick(HANDOFF)[:i % len(pick(HANDOFF))]
        for k, worker in rot:
            x = handoffs(worker, args.workers, args.seconds)
            hand[k].append(x)
            print(f"round {i + 1}: {k}: {x['rate']:.0f} hand-offs/s, "
                  f"{x['cmds']:.1f} commands / hand-off", file=sys.stderr)
        for k, f in pick(FLOOR):
            floor[k].append(f(args.uncontended))
            print(f"round {i + 1}: serial floor {k}: {floor[k][-1]:.0f}/s", file=sys.stderr)
        for k, f in pick(UNCONTENDED):
            unc[k].append(f(args.uncontended))
            print(f"round {i + 1}: uncontended {k}: {unc[k][-1]:.0f}/s", file=sys.stderr)
    text = section(args, hand, unc, floor, (loads0, os.getloadavg()[0]))
    print(text)
    if args.report:
        write_report(args.report, text)
        print(f"handoff.py: wrote the Python section of {args.report}", file=sys.stderr)


if __name__ == "__main__":
    main()
