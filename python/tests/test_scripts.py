"""The packaged scripts are the Rust crate's, byte for byte, and the
protocol version check refuses a mismatched client."""

import hashlib
import os

import pytest

import redbell
from redbell import _scripts

from conftest import REPO, unique

RUST_LUA = os.path.join(REPO, "src", "scripts", "lua")
PY_LUA = os.path.join(os.path.dirname(redbell.__file__), "lua")


def test_packaged_lua_files_equal_the_rust_crates():
    if not os.path.isdir(RUST_LUA):
        pytest.fail(f"{RUST_LUA} missing: run the suite from the repository")
    rust = sorted(f for f in os.listdir(RUST_LUA) if f.endswith(".lua"))
    py = sorted(f for f in os.listdir(PY_LUA) if f.endswith(".lua"))
    assert py == rust, "python/redbell/lua/ lists other files: run `make python-lua`"
    for f in rust:
        with open(os.path.join(RUST_LUA, f), "rb") as a, open(os.path.join(PY_LUA, f), "rb") as b:
            assert hashlib.sha1(a.read()).hexdigest() == hashlib.sha1(b.read()).hexdigest(), \
                f"python/redbell/lua/{f} differs from src/scripts/lua/{f}: run `make python-lua`"


def test_every_file_is_used_and_every_script_has_a_header():
    used = {"protocol", "wake_next", "fair_common", "sem_common", *_scripts.NAMES}
    on_disk = {f[:-4] for f in os.listdir(PY_LUA) if f.endswith(".lua")}
    assert on_disk == used
    for s in _scripts.all_scripts():
        assert s.source.startswith(_scripts._read("protocol"))
        assert f"-- {s.name}:".encode() in s.source, s.name


async def test_every_script_loads_under_its_sha(raw):
    for s in _scripts.all_scripts():
        assert (await raw.script_load(s.source)) == s.sha1, s.name
        sharded = s.sharded()
        assert (await raw.script_load(sharded.source)) == sharded.sha1, s.name


async def test_a_mismatched_version_is_refused_and_writes_nothing(client, raw, monkeypatch):
    name = unique("version")
    monkeypatch.setattr(_scripts, "PROTOCOL_VERSION", "2")
    with pytest.raises(redbell.ProtocolMismatch) as e:
        await client.mutex(name).try_lock()
    assert "client speaks 2, scripts speak 1" in str(e.value)
    assert await raw.keys(f"redbell:{{{name}}}*") == []
