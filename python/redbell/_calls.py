"""What every script call shares: the protocol's client-side numbers,
name and lease checks, the error mapping, a lock's keys, the scripts of each
kind, and the future of one script call (``_Call``).
"""

import asyncio
import math
import unicodedata
from typing import Any, Optional

from redis import exceptions as rexc

from . import _scripts
from .errors import (
    InvalidLease, InvalidName, KindConflict, NoPermission, PermitsMismatch,
    ProtocolMismatch, RedisError, WrongType,
)

# The protocol's client-side numbers (PROTOCOL.md, "The Rust client's numbers").
DEFAULT_LEASE = 30.0
FENCE_TTL_MS = 604_800_000
QUEUE_GRACE_MS = 2_000
PARK_MS = 1_000
MAX_PARK = 24 * 3600.0
HANDOFF_MS = 100
CLAIM_MS = 500
SEM_RESERVE_MS = 250
MAX_LEASE_MS = 31_536_000_000
RESPONSE_TIMEOUT = 2.0
RENEW_BATCH = 512
POOL_SIZE = 32
RETRY_AFTER = (0.05, 0.25, 1.0, 2.0)
"""Seconds before each retry of background work that failed (Rust's
background worker's ``RETRY_AFTER``); after the last it is given up."""


def _lease_ms(seconds: float) -> int:
    """A lease in whole ms, rounded up (duty 1); 1 ms to one year."""
    try:
        ms = math.ceil(float(seconds) * 1000)
    except (TypeError, ValueError, OverflowError):
        raise InvalidLease(f"lease {seconds!r} is not a number of seconds") from None
    if not 1 <= ms <= MAX_LEASE_MS:
        raise InvalidLease(f"lease {seconds!r} s is outside 1 ms .. 365 days")
    return ms


def _check_name(name: str) -> None:
    if not isinstance(name, str):
        raise InvalidName(f"lock name {name!r} is not a str")
    n = len(name.encode("utf-8", "surrogatepass"))
    if not 1 <= n <= 512:
        raise InvalidName(f"lock name is {n} bytes; 1 to 512 allowed")
    for c in name:
        if c in "{}" or unicodedata.category(c) in ("Cc", "Cs"):
            raise InvalidName(f"lock name {name!r} contains {c!r}")


def _map_error(e: Exception) -> Exception:
    """A redis-py exception as the redbell exception it means."""
    msg = str(e)
    if msg.startswith("REDBELL_PROTOCOL"):
        return ProtocolMismatch(
            f"{msg}: every client of one namespace must speak protocol "
            f"version {_scripts.PROTOCOL_VERSION}")
    if msg.startswith("WRONGKIND"):
        return KindConflict(msg)
    if msg.startswith("PERMITS"):
        try:
            stored: Optional[int] = int(msg.split()[1])
        except (IndexError, ValueError):
            stored = None
        return PermitsMismatch(msg, stored)
    if msg.startswith("WRONGTYPE"):
        return WrongType(msg)
    if isinstance(e, rexc.NoPermissionError) or msg.startswith("NOPERM") \
            or "user executing the script" in msg or "no permissions" in msg:
        # An ACL refusal: of a command, ``NOPERM``; of a command inside a
        # script, on Redis 7.0, ``ERR The user executing the script can't
        # ...`` (later servers say ``NOPERM`` there too), as Rust's mapping.
        return NoPermission(msg)
    return RedisError(msg or type(e).__name__)


class _Keys:
    """The keys and channels of one lock (PROTOCOL.md, "Keys")."""

    def __init__(self, prefix: str, name: str) -> None:
        self.name = name
        self.b = f"{prefix}:{{{name}}}"
        self.wake = f"{self.b}:wake:"
        """The wake prefix ``B:wake:`` (a client's channel is ``B:wake:C``)."""

    def __getattr__(self, sub: str) -> str:
        key = f"{self.b}:{sub.replace('_', ':')}"
        setattr(self, sub, key)  # computed once per handle
        return key


# Per kind: token letter, acquire/release/pass scripts.
_KINDS = {
    "mutex": ("m", "acquire", "release", "pass"),
    "fair": ("q", "fair_acquire", "fair_release", "fair_pass"),
    "semaphore": ("s", "sem_acquire", "sem_release", "sem_pass"),
    "election": ("l", "acquire", "release", "pass"),
    "read": ("r", "rw_read_acquire", "rw_read_release", ""),
    "write": ("w", "rw_write_acquire", "rw_write_release", "rw_pass"),
}
_RENEW_BY = {"semaphore": "semaphore", "read": "read"}
"""The renewal script of each kind: sem_extend, rw_read_extend, else extend."""
RW_WINDOW_MS = 500
"""window_ms of the RwLock releases (PROTOCOL.md, ``INTENT_WINDOW_MS``)."""


def _release_code(reply: Any) -> int:
    """The conversion of a release's reply (1 / 0 / -1); a release sent
    again after its connection died is recognised by it (``_answered``)."""
    return int(reply)


class _Reply:
    __slots__ = ("acquired", "value", "now_us")

    def __init__(self, reply: Any) -> None:
        self.acquired = int(reply[0]) == 1
        self.value = int(reply[1])
        """The fence if acquired, else the park (or pttl) in ms."""
        self.now_us = int(reply[2]) if len(reply) > 2 else None


class _Call(asyncio.Future):
    """The future of one script call, awaited directly by its caller. A
    caller cancelled while it waits cancels only this future: the call's
    reply is still read and kept, and :meth:`outcome` returns it (what
    ``asyncio.shield`` would do, one event-loop step sooner)."""

    def __init__(self) -> None:
        super().__init__()
        self._kept: Optional[tuple] = None
        self._waiter: Optional[asyncio.Future] = None
        self.written = False
        """Whether a send of this call was written to a connection (so it
        may have run, whatever it ended with). False for a call whose every
        connect failed: it never reached a server."""

    def settle(self, value: Any, error: Optional[BaseException]) -> None:
        """The call's outcome: a value, or the exception it ended with."""
        if self._kept is not None:
            return
        self._kept = (value, error)
        if not self.done():
            if error is None:
                self.set_result(value)
            else:
                self.set_exception(error)
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def outcome(self) -> Any:
        """The call's value once it answered, whether or not this future
        was cancelled; raises the exception the call ended with."""
        if self._kept is None:
            if self._waiter is None:
                self._waiter = self.get_loop().create_future()
            await asyncio.shield(self._waiter)
        assert self._kept is not None
        value, error = self._kept
        if error is not None:
            raise error
        return value


def _answered(value: Any) -> _Call:
    """A call already answered {0, 0}: an attempt that took nothing."""
    call = _Call()
    call.settle(_Reply([0, 0]), None)
    return call
