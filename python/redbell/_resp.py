"""A minimal RESP2 reader on an ``asyncio.Protocol``, for the two
connections a client keeps open: the multiplexed command connection
(``_mux``) and the pub/sub connection (``_hub``).

redis-py opens the connection (URL options, TLS, AUTH, ``SELECT``, Sentinel
discovery stay redis-py's); :func:`take_over` then moves its transport to a
:class:`RespProtocol`, which parses each chunk the socket delivers in the
event loop's own callback and hands every complete reply to ``on_reply``.
No reader task, no ``StreamReader``, no coroutine per line: a reply reaches
the future that waits for it in the same loop step that read it, one step
sooner than through redis-py's asyncio parser, at a fraction of its CPU.

It reads the reply shapes of RESP2: simple strings and bulk strings (as
``bytes``), integers, nulls (``None``), arrays (lists, nested), and errors
(as the ``redis.exceptions`` instance redis-py's own parser would give, so
``NoScriptError`` and friends keep their meaning). Anything else is a
protocol error: the connection is closed and ``on_lost`` is told.
"""

import asyncio
from typing import Any, Callable, List, Optional, Tuple

from redis import exceptions as rexc

try:  # redis-py 5 and later
    from redis._parsers.base import BaseParser as _Base
    _parse_error: Callable[[str], Exception] = _Base.parse_error
except ImportError:  # pragma: no cover - a redis-py that moved it
    def _parse_error(msg: str) -> Exception:
        if msg.startswith("NOSCRIPT "):
            return rexc.NoScriptError(msg[9:])
        if msg.startswith("NOPERM "):
            return rexc.NoPermissionError(msg[7:])
        return rexc.ResponseError(msg)


class _Partial(Exception):
    """The buffer ends inside a reply: wait for more bytes."""



def _value(buf: bytes, pos: int) -> Tuple[Any, int]:
    """The reply that starts at ``pos`` and the position after it; raises
    ``_Partial`` if ``buf`` ends first, ``InvalidResponse`` if malformed."""
    end = buf.find(b"\r\n", pos)
    if end < 0:
        raise _Partial
    t = buf[pos]
    if t == 36:  # $ bulk string
        n = int(buf[pos + 1:end])
        if n < 0:
            return None, end + 2
        start = end + 2
        stop = start + n
        if len(buf) < stop + 2:
            raise _Partial
        if buf[stop:stop + 2] != b"\r\n":
            raise rexc.InvalidResponse("bulk string longer than its length")
        return buf[start:stop], stop + 2
    if t == 58:  # : integer
        return int(buf[pos + 1:end]), end + 2
    if t == 42:  # * array
        n = int(buf[pos + 1:end])
        pos = end + 2
        if n < 0:
            return None, pos
        out: List[Any] = []
        for _ in range(n):
            v, pos = _value(buf, pos)
            out.append(v)
        return out, pos
    if t == 43:  # + simple string
        return buf[pos + 1:end], end + 2
    if t == 45:  # - error
        return _parse_error(buf[pos + 1:end].decode("utf-8", "replace")), end + 2
    raise rexc.InvalidResponse(f"protocol error: reply type byte {bytes([t])!r}")


class Reader:
    """Incremental RESP2 parsing: :meth:`feed` bytes as they come, get
    every reply they complete (a reply split across chunks waits for the
    rest)."""

    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = b""

    def feed(self, data: bytes) -> List[Any]:
        """The replies completed by ``data``, oldest first. An error reply
        is an exception instance in the list (not raised).

        Raises:
            redis.exceptions.InvalidResponse: the bytes are not RESP2; the
                reader is then unusable (close the connection).
        """
        buf = self._buf + data if self._buf else bytes(data)
        out: List[Any] = []
        pos = 0
        try:
            while pos < len(buf):
                v, pos = _value(buf, pos)
                out.append(v)
        except _Partial:
            pass
        except rexc.InvalidResponse:
            raise
        except (ValueError, IndexError, RecursionError) as e:
            raise rexc.InvalidResponse(f"protocol error: {e}") from None
        self._buf = buf[pos:]
        return out


class RespProtocol(asyncio.Protocol):
    """The protocol of a taken-over connection: ``on_reply(reply)`` for
    each reply in order, then ``on_lost(error)`` once, when the connection
    ends (closed by either side, or a protocol error)."""

    def __init__(self, on_reply: Callable[[Any], None],
                 on_lost: Callable[[Exception], None]) -> None:
        self._reader = Reader()
        self._on_reply = on_reply
        self._on_lost: Optional[Callable[[Exception], None]] = on_lost
        self._old: Optional[asyncio.BaseProtocol] = None
        self.transport: Optional[asyncio.Transport] = None

    def data_received(self, data: bytes) -> None:
        if self._on_lost is None:
            return  # ended: whatever follows is not read
        try:
            replies = self._reader.feed(data)
        except rexc.InvalidResponse as e:
            self.close(rexc.ConnectionError(str(e)))
            return
        for r in replies:
            if self._on_lost is None:
                return
            self._on_reply(r)

    def eof_received(self) -> Optional[bool]:
        return False  # the transport closes itself; connection_lost follows

    def connection_lost(self, exc: Optional[Exception]) -> None:
        self._end(rexc.ConnectionError(
            f"connection lost: {exc}" if exc is not None else "connection closed by server"))
        if self._old is not None:  # redis-py's stream protocol: its close waiter ends
            self._old.connection_lost(exc)
            self._old = None

    def write(self, data: bytes) -> None:
        """Write ``data``; raises ``ConnectionError`` if the connection ended."""
        t = self.transport
        if t is None or t.is_closing() or self._on_lost is None:
            raise rexc.ConnectionError("connection closed")
        t.write(data)

    def close(self, err: Exception) -> None:
        """End the connection now: ``on_lost(err)``, then close the socket."""
        self._end(err)
        if self.transport is not None:
            self.transport.close()

    def _end(self, err: Exception) -> None:
        lost, self._on_lost = self._on_lost, None
        if lost is not None:
            lost(err)


def take_over(conn: Any, proto: RespProtocol) -> None:
    """Move the transport of ``conn`` (a connected redis-py asyncio
    connection whose replies have all been read) to ``proto``. Closing
    ``conn`` (``disconnect``) still closes the socket."""
    transport = conn._writer.transport
    proto._old = transport.get_protocol()
    proto.transport = transport
    transport.set_protocol(proto)
    reader = conn._reader
    left = bytes(reader._buffer) if reader is not None else b""
    if left:  # read ahead by redis-py: ours now
        reader._buffer.clear()
        proto.data_received(left)
