"""HTTP/1.1 request framing for the agent, through h11 (a strict, well-kept parser).

:class:`RequestReader` reads one connection's requests, one at a time, each with a
fresh :class:`h11.Connection` fed what the previous one left unread (a pipelined
request). h11 refuses what RFC 9112 refuses: a malformed request line or field line, an
obsolete folded line, a field name with blanks, a ``Content-Length`` that is not plain
digits (``+2``, ``0_2``) or two of them that differ, a second ``Transfer-Encoding``, a
head over :data:`MAX_HEAD_BYTES`. On top of it the agent refuses: more than
:data:`MAX_FIELDS` fields (431); ``Content-Length`` together with ``Transfer-Encoding``
(400: the pair smuggles requests past proxies that pick the other one); a chunked body
(411: every client of the agent sends a length); a second ``Authorization`` or ``Host``
(400); HTTP versions other than 1.0 and 1.1 (505). Every refusal is a
:class:`FramingError` with the status to answer; the connection is then closed.
"""

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

import h11

from gameday.wire.http1 import MAX_FIELDS, MAX_HEAD_BYTES

__all__ = ["MAX_FIELDS", "MAX_HEAD_BYTES", "FramingError", "RequestHead", "RequestReader"]

#: Fields a request may carry once only (besides the framing ones h11 checks).
_SINGLE: Final = frozenset({b"authorization", b"host"})
_RECV_BYTES: Final = 65536
#: A field line that continues the one before (obs-fold, RFC 9112 §5.2).
_FOLDED: Final = re.compile(rb"\n[ \t]")


class FramingError(Exception):
    """The request cannot be framed: answer ``status`` with ``message``, then close."""

    def __init__(self, status: int, message: str) -> None:
        self.status = status
        self.message = message
        super().__init__(message)


@dataclass(frozen=True)
class RequestHead:
    """A request's line and fields (by lower-case name, ISO-8859-1); ``keep_alive``: the
    version's default (HTTP/1.1); ``length``: its body's ``Content-Length`` (0: none)."""

    method: str
    target: str
    version: str
    fields: dict[str, str]
    keep_alive: bool
    length: int


class RequestReader:
    """The requests arriving through ``recv`` (a socket's), read with h11."""

    def __init__(self, recv: Callable[[int], bytes]) -> None:
        self._recv = recv
        self._leftover = b""
        self._conn: h11.Connection | None = None
        #: Whether the last request's body was read whole (else the connection must close).
        self.finished = True

    def wait(self) -> bool:
        """Block until a byte of the next request is here (True) or the peer closed
        (False); the socket's own timeout applies."""
        if self._leftover:
            return True
        data = self._recv(_RECV_BYTES)
        self._leftover = data
        return bool(data)

    def head(self) -> RequestHead | None:
        """The next request's head, None if the connection ended cleanly before one;
        :class:`FramingError` for anything h11 or the module doc refuses."""
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)
        self._conn, self.finished = conn, False
        data, self._leftover = self._leftover, b""
        self._fed = [data]
        if data:
            conn.receive_data(data)
        event = self._next(conn)
        if isinstance(event, h11.ConnectionClosed):
            self.finished = True
            return None
        if not isinstance(event, h11.Request):
            raise FramingError(400, "expected a request")
        raw = b"".join(self._fed)
        head = raw[:len(raw) - len(conn.trailing_data[0])]
        self._fed = []
        if len(head) > MAX_HEAD_BYTES:  # h11 bounds only a head still incomplete
            raise FramingError(431, f"bad request: a head over {MAX_HEAD_BYTES} bytes")
        if _FOLDED.search(head):  # h11 would unfold it; a proxy may not
            raise FramingError(400, "bad request: an obsolete folded header line")
        return self._checked(event)

    def body(self, limit: int) -> bytes:
        """The body of the request :meth:`head` read, at most ``limit`` bytes (413 over
        it, before any of it is read)."""
        conn = self._conn
        if conn is None or self.finished:
            return b""
        length = self._length
        if length > limit:
            raise FramingError(413, f"body of {length} bytes is over the agent's limit of "
                               f"{limit} bytes")
        chunks: list[bytes] = []
        while True:
            event = self._next(conn)
            if isinstance(event, h11.Data):
                chunks.append(bytes(event.data))
            elif isinstance(event, h11.EndOfMessage):
                break
            else:
                raise FramingError(400, "the request body ended early")
        self._leftover, _ = conn.trailing_data
        self.finished = True
        return b"".join(chunks)

    def _next(self, conn: h11.Connection) -> object:
        while True:
            try:
                event = conn.next_event()
            except h11.RemoteProtocolError as exc:
                raise FramingError(exc.error_status_hint, f"bad request: {exc}") from None
            if event is not h11.NEED_DATA:
                return event
            data = self._recv(_RECV_BYTES)  # b"": the peer closed
            if self._fed is not None and len(self._fed) < 4096:
                self._fed.append(data)
            conn.receive_data(data)

    def _checked(self, request: h11.Request) -> RequestHead:
        version = request.http_version.decode("ascii", "replace")
        if version not in ("1.0", "1.1"):
            raise FramingError(505, f"HTTP version {version[:8]} is not supported; use "
                               "HTTP/1.1")
        headers = request.headers.raw_items()
        if len(headers) > MAX_FIELDS:
            raise FramingError(431, f"more than {MAX_FIELDS} header fields")
        fields: dict[str, str] = {}
        for raw_name, value in headers:
            name = raw_name.lower()
            key = name.decode("iso-8859-1")
            if key in fields:
                if name in _SINGLE:
                    raise FramingError(400, f"more than one {raw_name.decode('latin-1')} "
                                       "field")
                continue
            fields[key] = value.decode("iso-8859-1")
        if "transfer-encoding" in fields:
            if "content-length" in fields:
                raise FramingError(400, "Content-Length together with Transfer-Encoding")
            raise FramingError(411, "send the body with a Content-Length, not chunked")
        self._length = int(fields.get("content-length", "0"))  # h11 checked: digits
        if self._length == 0:
            self._finish_empty()
        return RequestHead(method=request.method.decode("ascii"),
                           target=request.target.decode("iso-8859-1"),
                           version=f"HTTP/{version}", fields=fields,
                           keep_alive=version == "1.1", length=self._length)

    def _finish_empty(self) -> None:
        """A request without a body: its end is already framed."""
        conn = self._conn
        assert conn is not None
        event = self._next(conn)
        if not isinstance(event, h11.EndOfMessage):
            raise FramingError(400, "expected the end of a request without a body")
        self._leftover, _ = conn.trailing_data
        self.finished = True

    _length = 0
    _fed: list[bytes] | None = None  # what :meth:`head` fed h11, while it reads a head
