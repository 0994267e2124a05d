"""The protocol's Lua scripts, assembled as PROTOCOL.md ("Scripts") says.

Each script's source is ``protocol.lua``, then the shared code it calls,
then its own file, concatenated byte for byte; the files under ``lua/`` are
copies of the Rust crate's ``src/scripts/lua/`` (``make python-lua``), so
every script has the same SHA1 in both languages. On Redis Cluster the
variant with every ``'PUBLISH'`` replaced by ``'SPUBLISH'`` runs instead.

This module imports nothing but the standard library, so that
``python3 redbell/_scripts.py`` prints ``name sha1`` lines for the Rust
test that compares them with ``redbell::scripts()``.
"""

import hashlib
import os
from typing import Dict, List, Tuple

PROTOCOL_VERSION = "1"
"""ARGV[1] of every script: the protocol version this client speaks."""

_SHARED: Dict[str, Tuple[str, ...]] = {
    "release": ("wake_next",),
    "pass": ("wake_next",),
    "break_lock": ("wake_next", "fair_common"),
    "fair_acquire": ("fair_common",),
    "fair_release": ("fair_common",),
    "fair_pass": ("fair_common",),
    "sem_acquire": ("sem_common",),
    "sem_release": ("sem_common",),
    "sem_pass": ("sem_common",),
    "sem_extend": ("sem_common",),
}

NAMES: List[str] = [
    "acquire", "release", "extend", "pass",
    "fair_acquire", "fair_release", "fair_pass",
    "rw_read_acquire", "rw_write_acquire", "rw_read_release",
    "rw_write_release", "rw_read_extend", "rw_pass",
    "inspect", "break_lock",
    "sem_acquire", "sem_release", "sem_pass", "sem_extend", "sem_status",
    "elect_leader", "elect_proclaim", "elect_resign",
]
"""Every script, in the order ``redbell::scripts()`` lists them."""

_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "lua")


def _read(part: str) -> bytes:
    with open(os.path.join(_DIR, part + ".lua"), "rb") as f:
        return f.read()


class Script:
    """One script: its name, its assembled source and that source's SHA1."""

    __slots__ = ("name", "source", "sha1")

    def __init__(self, name: str, source: bytes) -> None:
        self.name = name
        self.source = source
        self.sha1 = hashlib.sha1(source).hexdigest()

    def sharded(self) -> "Script":
        """The Redis Cluster variant (``SPUBLISH`` for ``PUBLISH``)."""
        return Script(self.name, self.source.replace(b"'PUBLISH'", b"'SPUBLISH'"))


def load(name: str) -> Script:
    """Assemble script ``name`` from the packaged ``.lua`` files."""
    parts = ("protocol",) + _SHARED.get(name, ()) + (name,)
    return Script(name, b"".join(_read(p) for p in parts))


def all_scripts() -> List[Script]:
    """Every script, in ``redbell::scripts()`` order."""
    return [load(n) for n in NAMES]


if __name__ == "__main__":
    for s in all_scripts():
        print(s.name, s.sha1)
