"""redbell: event-driven distributed locks on Redis, sharing locks with the
Rust crate ``redbell`` through the wire protocol of ``PROTOCOL.md`` (version
1) and the same ``.lua`` scripts, byte for byte.

asyncio::

    client = await redbell.connect("redis://127.0.0.1:6379")
    async with client.mutex("invoices") as guard:
        ...  # guard.fence, guard.lost
    await client.aclose()

Sentinel: :func:`connect_sentinel`; Redis Cluster: :func:`connect_cluster`.
Synchronous code: :mod:`redbell.sync`.
"""

from ._client import Client, connect
from ._guard import Guard
from ._handles import FairMutex, Mutex, Semaphore
from ._scripts import PROTOCOL_VERSION
from ._cluster import connect_cluster
from ._election import Election, Leader, Leadership
from ._rwlock import RwLock
from ._sentinel import connect_sentinel
from .errors import (
    ClientClosed, InvalidLease, InvalidName, InvalidPermits, KindConflict,
    NoPermission, NotHeld, PermitsMismatch, ProtocolMismatch, RedbellError,
    RedisError, Timeout, WrongType,
)

__all__ = [
    "Election", "Leader", "Leadership", "RwLock",
    "Client", "FairMutex", "Guard", "Mutex", "Semaphore", "connect", "connect_cluster", "connect_sentinel",
    "PROTOCOL_VERSION",
    "ClientClosed", "InvalidLease", "InvalidName", "InvalidPermits", "KindConflict",
    "NoPermission", "NotHeld", "PermitsMismatch", "ProtocolMismatch", "RedbellError",
    "RedisError", "Timeout", "WrongType",
]
