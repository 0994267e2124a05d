"""What one look at the sentinels decides (the :class:`Follower`'s
resolution, driven by hand: no subscription, so no announcement moves it
behind the test's back), with the client's sentinels behind proxies that
black-hole or delay what they relay. Each test on a topology of its own."""

import asyncio

import redis.asyncio as aioredis

from redbell._follow import Follower

from conftest import eventually
from test_sentinel import _sentinels_name
from topology import Proxy, SentinelTopology


async def _proxied(topo):
    """A started proxy in front of each of the topology's sentinels."""
    proxies = [Proxy(topo.base + 10 + i) for i in range(3)]
    for p in proxies:
        await p.start()
    return proxies


async def test_a_sentinel_back_from_a_partition_is_waited_for_again():
    """Sentinels 1 and 2 are partitioned from the client for one look (it
    waits for them one timeout, then marks them silent), then come back. A
    look in which sentinel 0 answers first is decided by it alone (the two
    were silent at their last look), but their answers, a moment later,
    must clear their marks: they are not silent any more. So in the next
    look, when sentinel 0's answer is stale (given before a failover,
    delivered after it: a slow link), the client waits for the two others,
    which name the new primary, and moves. It used to drop the two
    unanswered asks, so their marks stayed set for good and every later
    look was decided by whichever sentinel answered first, here the stale
    one: the client stayed on the old primary, which still answers as a
    primary (``SENTINEL FAILOVER`` leaves it up until it is converted)."""
    topo = SentinelTopology()
    proxies = await _proxied(topo)
    f = Follower([("127.0.0.1", p.port, {}) for p in proxies], topo.MASTER,
                 dict(protocol=2), 8.0)
    try:
        await f.resolve()
        assert f.address == ("127.0.0.1", topo.primary_port)

        # Sentinels 1 and 2 partitioned: one look waits for them (a short
        # timeout for this look only) and marks them silent.
        f.timeout = 1.0
        proxies[1].black_hole = proxies[2].black_hole = True
        await f.resolve()
        assert f.address == ("127.0.0.1", topo.primary_port)
        f.timeout = 8.0

        # Back, but their answers come after sentinel 0's: it decides alone.
        proxies[1].black_hole = proxies[2].black_hole = False
        proxies[1].hold_down = proxies[2].hold_down = True
        assert not await f.resolve()
        proxies[1].hold_down = proxies[2].hold_down = False
        await asyncio.sleep(0.5)  # their answers arrive

        # Sentinel 0 answers before the failover, and the answer arrives
        # after it; sentinels 1 and 2 are asked only after it.
        proxies[0].hold_down = True
        proxies[1].hold_up = proxies[2].hold_up = True
        look = asyncio.ensure_future(f.resolve())
        await asyncio.sleep(0.5)  # sentinel 0 has answered
        s = aioredis.Redis(port=topo.base + 11)
        assert await s.execute_command("SENTINEL", "FAILOVER", topo.MASTER)
        await s.aclose()
        assert await eventually(lambda: _sentinels_name(topo, topo.replica_port), 20, 0.05), \
            "the sentinels did not agree on the new primary within 20 s"
        old = aioredis.Redis(port=topo.primary_port)
        assert (await old.role())[0] == b"master", "the old primary was converted already"
        await old.aclose()
        proxies[0].hold_down = False
        await asyncio.sleep(0.5)  # the stale answer is in
        proxies[1].hold_up = proxies[2].hold_up = False
        assert await asyncio.wait_for(look, 20), "the look did not move the client"
        assert f.address == ("127.0.0.1", topo.replica_port)
    finally:
        for p in proxies:
            p.hold_up = p.hold_down = p.black_hole = False
        await f.aclose()
        for p in proxies:
            await p.cut()
        topo.stop()


async def _settled(topo, primary: int, replica: int) -> bool:
    """Whether ``replica`` replicates from ``primary`` with its link up and
    every sentinel sees ``primary`` with one replica and no flag but
    ``master``: a failover back can be asked for."""
    r = aioredis.Redis(port=replica)
    try:
        info = await r.info("replication")
    finally:
        await r.aclose()
    if info.get("master_link_status") != "up":
        return False
    for i in range(3):
        s = aioredis.Redis(port=topo.base + 10 + i, decode_responses=True)
        try:
            m = await s.execute_command("SENTINEL", "MASTER", topo.MASTER)
        finally:
            await s.aclose()
        m = dict(zip(m[::2], m[1::2])) if isinstance(m, list) else m
        if int(m["port"]) != primary or m["flags"] != "master" or m["num-slaves"] != "1":
            return False
    return True


async def _fail_over(topo, to: int) -> None:
    """``SENTINEL FAILOVER`` through sentinel 0 (asked again while it
    refuses) until every sentinel names ``to``."""
    async def asked() -> bool:
        s = aioredis.Redis(port=topo.base + 10)
        try:
            return bool(await s.execute_command("SENTINEL", "FAILOVER", topo.MASTER))
        except Exception:
            return False
        finally:
            await s.aclose()
    assert await eventually(asked, 20, 0.1), "the sentinels refused the failover for 20 s"
    assert await eventually(lambda: _sentinels_name(topo, to), 20, 0.05), \
        f"the sentinels did not agree on {to} within 20 s"


async def test_a_stale_answer_older_than_the_primary_named_in_the_same_look_is_no_news():
    """The client missed a failover and the one back: it is on its old
    primary again, which the sentinels name at configuration epoch 2, while
    it found it at epoch 0. In a look, sentinel 0 names it at epoch 2, then
    sentinel 2's answer arrives, stale (given before the failover back): the
    other node at epoch 1, which still answers as a primary until it is
    converted. That answer is older than what the look already heard, and
    the client must stay. It took it for news (newer than epoch 0) and moved
    to the demoted node."""
    topo = SentinelTopology()
    proxies = await _proxied(topo)
    f = Follower([("127.0.0.1", p.port, {}) for p in proxies], topo.MASTER,
                 dict(protocol=2), 8.0)
    p, q = ("127.0.0.1", topo.primary_port), ("127.0.0.1", topo.replica_port)
    try:
        await f.resolve()
        assert f.address == p
        # A failover the client does not look at.
        await _fail_over(topo, topo.replica_port)
        assert await eventually(lambda: _settled(topo, topo.replica_port, topo.primary_port),
                                40, 0.1), "the old primary did not settle as a replica"

        # Sentinel 0 is asked only after the failover back, sentinel 1
        # never answers, sentinel 2 answers before it, held back.
        proxies[0].hold_up = True
        proxies[1].black_hole = True
        proxies[2].hold_down = True
        look = asyncio.ensure_future(f.resolve())
        await asyncio.sleep(0.5)  # sentinel 2 has answered
        await _fail_over(topo, topo.primary_port)
        demoted = aioredis.Redis(port=topo.replica_port)
        assert (await demoted.role())[0] == b"master", "converted already"
        await demoted.aclose()
        proxies[0].hold_up = False
        await asyncio.sleep(0.5)  # sentinel 0's answer is in
        proxies[2].hold_down = False
        await asyncio.wait_for(look, 20)
        assert f.address == p, f"moved to the demoted {f.address}"
        assert f.address != q
    finally:
        for x in proxies:
            x.hold_up = x.hold_down = x.black_hole = False
        await f.aclose()
        for x in proxies:
            await x.cut()
        topo.stop()
