"""Refusals by the server's ACL: typed as :class:`redbell.NoPermission`,
never retried (trying again changes nothing)."""

import uuid
from urllib.parse import urlparse

import pytest

import redbell

from conftest import redis_url, unique
from topology import Monitor


async def test_a_release_refused_inside_its_script_is_no_permission_not_retried(raw):
    """The user may run scripts but not ``DEL``: the release's own ``DEL``,
    run by the script, is refused. Redis 7.0 says so with ``ERR The user
    executing the script can't run this command`` (later servers with
    ``NOPERM``): an ``unlock`` raises ``NoPermission``, and ``aclose``'s
    background release is sent once, not retried (``Client._retried``
    retries ``RedisError`` only).

    Before: the refusal was a plain ``RedisError``, so ``unlock`` raised
    ``RedisError`` and ``aclose`` sent the release 5 times over 3.3 s."""
    from redbell import _scripts

    port = urlparse(redis_url()).port or 6379
    user = f"redbell-acl-{uuid.uuid4().hex[:8]}"
    await raw.execute_command("ACL", "SETUSER", user, "on", ">pw", "~*", "&*", "+@all")
    monitor = Monitor(port)
    c = None
    names = [unique("acl-unlock"), unique("acl-close")]
    try:
        c = await redbell.connect(f"redis://{user}:pw@127.0.0.1:{port}")
        first = await c.mutex(names[0]).lock()
        second = await c.mutex(names[1]).lock()
        await raw.script_load(_scripts.load("release").source)  # no NOSCRIPT fallback
        await raw.execute_command("ACL", "SETUSER", user, "-del")

        with pytest.raises(redbell.NoPermission):
            await first.unlock()

        await monitor.start()
        await c.aclose()
        c = None
        await monitor.sync()
        sends = monitor.naming(second.token)
        assert len(sends) == 1, f"aclose sent the refused release {len(sends)} times: {sends}"
        assert await raw.get(f"redbell:{{{names[1]}}}") == second.token.encode(), \
            "the refused release changed the lock"
    finally:
        await monitor.stop()
        if c is not None:
            await c.aclose()
        await raw.execute_command("ACL", "DELUSER", user)
        await raw.delete(*(f"redbell:{{{n}}}" for n in names))
