"""One multiplexed command connection: every call is written at once and
its reply matched in order (Redis answers each connection in order), as
the Rust client's multiplexed connection does.

Why not ``redis.asyncio.Redis`` per call: a pooled call costs a pool
checkout, a timeout context per read and a task per cancel-safe attempt,
which made an uncontended lock + unlock about twice as slow as redis-py's
synchronous ``Lock``. Here a call is one write and one future:

- **Sent at once, in order.** :meth:`Mux.send` writes the command before
  it returns (or queues it while the connection is being opened), so two
  calls of one task reach the server in the order they were made: a
  release sent after an attempt always runs after it.
- **Cancel-safe.** A call's reply is handed to its ``sink`` by the
  connection's reader, whoever still waits for it: a caller that stops
  waiting leaves the reply to be read and its outcome known, as
  PROTOCOL.md duty 10 needs.
- **Liveness.** A reply later than ``timeout`` seconds closes the
  connection; every call on it fails with ``ConnectionError`` and the next
  call opens a new one.
- **Sent or not.** A call that fails tells its sink whether it was
  written: one failed by its connect (refused, e.g. a dead primary) never
  reached a server, so nothing it would have done needs undoing.

The connection comes from the redis-py pool's ``make_connection`` (so URL
options, TLS, AUTH and Sentinel discovery are redis-py's); once open, its
replies are read by ``_resp``'s protocol, which settles each call in the
loop step that read its reply.
"""

import asyncio
import functools
from collections import deque
from typing import Any, Callable, Deque, List, Optional, Set, Tuple

from redis import exceptions as rexc

from ._resp import RespProtocol, take_over


Sink = Callable[[Any, Optional[Exception], bool], None]
"""Called once per call: ``(reply, None, True)`` or ``(None, error, sent)``,
``sent`` False when the call was never written to a connection (its
connect failed, or the client closed first): then nothing of it ran."""


def pack(args: "Tuple[Any, ...]") -> bytes:
    """A command as a RESP array of bulk strings (str as UTF-8, int in decimal)."""
    out: List[bytes] = [b"*%d\r\n" % len(args)]
    for a in args:
        b = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(b), b))
    return b"".join(out)


class _Link:
    """One open connection and the replies it owes, oldest first."""

    __slots__ = ("conn", "pending", "proto")

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.pending: "Deque[Tuple[Sink, float]]" = deque()
        self.proto: Optional[RespProtocol] = None


class Mux:
    """A multiplexed connection of a redis-py connection pool."""

    def __init__(self, pool: Any, timeout: float) -> None:
        self._pool = pool
        self._timeout = timeout
        self._link: Optional[_Link] = None
        self._opening: Optional[asyncio.Task] = None
        self._backlog: "List[Tuple[bytes, Sink]]" = []
        """Calls made while the connection is being opened, in order."""
        self._watchdog: Optional[asyncio.TimerHandle] = None
        self._closing: Set[asyncio.Task] = set()
        """Disconnects of ended connections, in flight."""
        self._closed = False

    def send(self, packed: bytes, sink: Sink) -> None:
        """Write one packed command; ``sink`` gets its reply, or the
        ``ResponseError`` / ``ConnectionError`` it ended with and whether
        the command was written (never from within this call)."""
        loop = asyncio.get_running_loop()
        if self._closed:
            loop.call_soon(sink, None, rexc.ConnectionError("client closed"), False)
            return
        link = self._link
        if link is None:
            self._backlog.append((packed, sink))
            if self._opening is None:
                self._opening = loop.create_task(self._open())
            return
        self._write(link, packed, sink, loop.time())

    def _write(self, link: _Link, packed: bytes, sink: Sink, now: float) -> None:
        try:
            assert link.proto is not None
            link.proto.write(packed)
        except Exception as e:
            # Not written: end this connection; the call goes on a new one.
            self._fail(link, e if isinstance(e, rexc.ConnectionError)
                       else rexc.ConnectionError(str(e) or type(e).__name__))
            self._backlog.append((packed, sink))
            if self._opening is None:
                self._opening = asyncio.get_running_loop().create_task(self._open())
            return
        link.pending.append((sink, now))
        if self._watchdog is None:
            self._watchdog = asyncio.get_running_loop().call_at(now + self._timeout, self._check)

    async def _open(self) -> None:
        conn = self._pool.make_connection()
        try:
            # Bounded: redis-py's handshake (CLIENT SETINFO, AUTH, SELECT)
            # waits for replies; a server that accepts the connection and
            # never answers (a partition, a frozen server) would otherwise
            # hold every later call in the backlog for good.
            await asyncio.wait_for(conn.connect(), 2 * self._timeout)
        except BaseException as e:
            if isinstance(e, asyncio.TimeoutError):
                e = rexc.TimeoutError("no answer to the connection handshake in time")
            self._opening = None
            backlog, self._backlog = self._backlog, []
            err = e if isinstance(e, Exception) else rexc.ConnectionError("connect cancelled")
            for _, sink in backlog:
                sink(None, err, False)  # never written
            try:
                await conn.disconnect(nowait=True)
            except Exception:
                pass
            if not isinstance(e, Exception):
                raise
            return
        self._opening = None
        conn.socket_timeout = None  # reads are ours now; the watchdog bounds calls
        if self._closed:
            await conn.disconnect(nowait=True)
            backlog, self._backlog = self._backlog, []
            for _, sink in backlog:
                sink(None, rexc.ConnectionError("client closed"), False)
            return
        link = _Link(conn)
        link.proto = RespProtocol(functools.partial(self._reply, link),
                                  functools.partial(self._lost, link))
        self._link = link
        take_over(conn, link.proto)
        backlog, self._backlog = self._backlog, []
        now = asyncio.get_running_loop().time()
        for packed, sink in backlog:
            if self._link is not link:  # it ended at once (bytes nobody asked for)
                sink(None, rexc.ConnectionError("connection closed"), False)
            else:
                self._write(link, packed, sink, now)

    def _reply(self, link: _Link, reply: Any) -> None:
        """The protocol's callback: ``reply`` answers the oldest call owed."""
        if not link.pending:
            assert link.proto is not None
            link.proto.close(rexc.ConnectionError("reply to no call"))
            return
        sink, _ = link.pending.popleft()
        if isinstance(reply, Exception):  # an error reply, as redis-py maps it
            sink(None, reply, True)
        else:
            sink(reply, None, True)

    def _lost(self, link: _Link, err: Exception) -> None:
        """The protocol's callback: the connection ended with ``err``."""
        self._fail(link, err)

    def _fail(self, link: _Link, err: Exception) -> None:
        """End ``link``: every call it owes fails with ``err``, and its
        connection is closed."""
        if self._link is link:
            self._link = None
        while link.pending:
            sink, _ = link.pending.popleft()
            sink(None, err, True)  # written: it may have run
        if link.proto is not None:
            link.proto.close(err)  # no-op once ended
        if link.conn is not None:
            conn, link.conn = link.conn, None
            t = asyncio.get_running_loop().create_task(conn.disconnect(nowait=True))
            self._closing.add(t)
            t.add_done_callback(self._closed_one)

    def _closed_one(self, t: "asyncio.Task") -> None:
        self._closing.discard(t)
        if not t.cancelled():
            t.exception()  # retrieved: a failed disconnect is of no interest

    def _check(self) -> None:
        """The watchdog: close the connection when its oldest call is overdue."""
        self._watchdog = None
        link = self._link
        if link is None or not link.pending:
            return
        loop = asyncio.get_running_loop()
        due = link.pending[0][1] + self._timeout
        if loop.time() >= due:
            self._fail(link, rexc.TimeoutError("no reply within the response timeout"))
            return
        self._watchdog = loop.call_at(due, self._check)

    def drop(self) -> None:
        """Close the connection now (the primary moved): calls it owes fail
        with ``ConnectionError``, and the next call opens a new one."""
        link = self._link
        if link is not None:
            self._fail(link, rexc.ConnectionError("the primary moved"))

    async def aclose(self) -> None:
        """Close the connection; calls still owed fail with ConnectionError."""
        self._closed = True
        if self._watchdog is not None:
            self._watchdog.cancel()
        if self._opening is not None:
            self._opening.cancel()
            try:
                await self._opening
            except BaseException:
                pass
        link = self._link
        if link is not None:
            self._fail(link, rexc.ConnectionError("client closed"))
        while self._closing:
            await asyncio.gather(*list(self._closing), return_exceptions=True)
