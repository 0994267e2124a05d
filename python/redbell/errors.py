"""The exception hierarchy, mirroring the Rust crate's ``Error`` enum.

Every exception redbell raises is a :class:`RedbellError`. Timeout,
cancellation (``asyncio.CancelledError``, never wrapped) and conflicts are
distinct, so a caller can tell a wait that ran out from one that failed.
"""

from typing import Optional


class RedbellError(Exception):
    """Base class of every redbell error."""


class Timeout(RedbellError, TimeoutError):
    """The lock was not acquired before the caller's timeout (Rust ``Error::Timeout``)."""


class NotHeld(RedbellError):
    """The lock was no longer held by this guard: its lease expired, or
    another token took or broke it (Rust ``Error::NotHeld``)."""


class InvalidName(RedbellError, ValueError):
    """A lock name outside the protocol's rules: 1 to 512 bytes of UTF-8,
    no ``{``, ``}`` or control character (Rust ``Error::InvalidName``)."""


class InvalidLease(RedbellError, ValueError):
    """A lease (or timeout) outside 1 ms to one year (Rust ``Error::InvalidLease``)."""


class InvalidPermits(RedbellError, ValueError):
    """A semaphore permit count below 1 (Rust ``Error::InvalidPermits``)."""


class WrongType(RedbellError):
    """A key of the lock holds foreign data of another Redis type (Rust ``Error::WrongType``)."""


class KindConflict(RedbellError):
    """The name is in use as another kind of lock (the ``WRONGKIND`` reply;
    Rust ``Error::KindConflict``)."""


class PermitsMismatch(RedbellError):
    """The semaphore is in use with another permit count (the ``PERMITS``
    reply; Rust ``Error::PermitsMismatch``)."""

    def __init__(self, message: str, stored: Optional[int] = None) -> None:
        super().__init__(message)
        self.stored = stored
        """The permit count the server holds, if it could be read."""


class NoPermission(RedbellError):
    """The server's ACL refused a command (``NOPERM``; Rust ``Error::NoPermission``)."""


class ProtocolMismatch(RedbellError):
    """The scripts speak another protocol version (the ``REDBELL_PROTOCOL``
    reply; Rust ``Error::Protocol``). Every client of one namespace (server
    and prefix) must speak one protocol version. Not retryable."""


class ClientClosed(RedbellError):
    """The client was closed (``aclose``) (Rust ``Error::Closed``)."""


class RedisError(RedbellError):
    """Any other Redis or connection error; the cause is ``__cause__``
    (Rust ``Error::Redis``)."""
