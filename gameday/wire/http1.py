"""The agent client's HTTP/1.1: one request at a time on a kept-alive connection (plain
TCP or TLS), written whole, its answer read strictly and within bounds.

It stands in for :mod:`http.client` on the orchestrator's side, where a fan-out sends
one request to each agent and reads one answer from each: there http.client's request
(each header line checked by itself, the head and the body in two writes) and its answer
(the head parsed by the email package) were 31 % of the orchestrator's time at 16,384
GPUs (``bench/fleet.py --profile``), over a tenth of the 1 s goal. Here a request is
made by :func:`request_bytes` and written with one ``sendall``; an answer's head is
found with one search of the bytes received and split once. The agent's own side, a
security boundary, keeps h11 (``gameday.agent.framing``).

What it accepts of an answer, and refuses with :class:`MalformedAnswer` otherwise:

- a status line ``HTTP/1.0`` or ``HTTP/1.1``, three digits, an optional reason; lines
  end in CRLF;
- at most :data:`MAX_FIELDS` field lines in a head of at most :data:`MAX_HEAD_BYTES`,
  each a token, a colon and a value without control characters (a folded line, a blank
  before the colon, a bare CR or LF are refused);
- a body framed by ``Content-Length`` (plain digits; repeated, the values must agree), by
  ``Transfer-Encoding: chunked`` alone (with a length too, or another coding: refused),
  or by the end of the connection; none for 1xx, 204 and 304 answers; at most
  ``max_body`` bytes either way;
- informational (1xx) answers are skipped, at most :data:`MAX_INFORMATIONAL` of them;
- the whole answer within the caller's deadline (:meth:`Connection.read_answer`), not
  only each read within the timeout: a server that trickles bytes is cut off.

A connection closed before any byte of an answer raises :class:`ConnectionResetError`
(a kept-alive connection the server had closed: the caller may send again on a new
one); the timeout, or the deadline, raises :class:`TimeoutError`. The head's bounds are
the agent's too (``gameday.agent.framing`` reads requests within them).
"""

import re
import socket
import ssl
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

__all__ = ["MAX_FIELDS", "MAX_HEAD_BYTES", "MAX_INFORMATIONAL", "Answer", "Connection",
           "MalformedAnswer", "request_bytes"]

#: The longest head (start line and fields) either end reads, in bytes.
MAX_HEAD_BYTES: Final = 65536
#: The most field lines a head (or a chunked body's trailer) may carry.
MAX_FIELDS: Final = 100
#: The most informational (1xx) answers skipped before the answer.
MAX_INFORMATIONAL: Final = 8
_RECV_BYTES: Final = 65536
_STATUS: Final = re.compile(rb"HTTP/([0-9]\.[0-9]) ([0-9]{3})(?: [\t\x20-\x7e\x80-\xff]*)?")
_TOKEN: Final = re.compile(rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
#: What a field value (or a request's target or header value) must not hold.
_CONTROL: Final = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")
_DIGITS: Final = re.compile(rb"[0-9]{1,19}")
_HEX: Final = re.compile(rb"[0-9A-Fa-f]{1,16}")
_NO_BODY: Final = frozenset({204, 304})


class MalformedAnswer(Exception):
    """The answer cannot be read as HTTP/1.1 within the bounds: why, in one line."""


@dataclass(frozen=True)
class Answer:
    """An answer read whole: its status, its body, and whether the connection stays
    open for the next request."""

    status: int
    body: bytes
    keep_alive: bool


def request_bytes(method: str, target: str, host: str, fields: Mapping[str, str],
                  body: bytes | None) -> bytes:
    """A request, head and body, ready for one write: ``Host`` first, then ``fields``,
    then ``Content-Length`` when there is a body. :class:`ValueError` for a method or
    field name that is not a token, or a target or value that holds a control character
    (or, the target, a blank), which would split the request."""
    text = [method, target, host, *fields.values()]
    if (not all(_TOKEN.fullmatch(name.encode("latin-1")) for name in (method, *fields))
            or not target or " " in target
            or any(_CONTROL.search(part.encode("latin-1")) for part in text)):
        raise ValueError(f"{method} {target!r}: a request line or field would be split")
    head = f"{method} {target} HTTP/1.1\r\nHost: {host}\r\n" + "".join(
        f"{name}: {value}\r\n" for name, value in fields.items())
    if body is not None:
        head += f"Content-Length: {len(body)}\r\n"
    data = (head + "\r\n").encode("latin-1")
    return data + body if body else data


class Connection:
    """One kept-alive connection to ``host``:``port`` (TLS with ``tls``, the certificate
    checked for ``server_name``), opened by the first :meth:`send` that finds it closed.
    Not thread-safe: its owner serialises requests."""

    def __init__(self, host: str, port: int, *, timeout_s: float,
                 tls: ssl.SSLContext | None = None, server_name: str | None = None,
                 max_body: int) -> None:
        self.host = host
        self.port = port
        self.timeout_s = timeout_s
        self.max_body = max_body
        self._tls = tls
        self._server_name = server_name or host
        self._sock: socket.socket | None = None
        self._buffer = bytearray()
        self._deadline: float | None = None  # time.monotonic() of the answer's deadline

    @property
    def sock(self) -> socket.socket | None:
        """The open socket, or None."""
        return self._sock

    @property
    def is_open(self) -> bool:
        return self._sock is not None

    def fileno(self) -> int:
        """The socket's descriptor (for ``selectors``), or -1 when closed."""
        return -1 if self._sock is None else self._sock.fileno()

    def send(self, data: bytes) -> None:
        """Write one request whole (connecting first if the connection is closed)."""
        if self._sock is None:
            self._sock = self._connect()
        self._sock.settimeout(self.timeout_s)  # (a read before may have shortened it)
        self._sock.sendall(data)

    def read_answer(self, deadline: float | None = None) -> Answer:
        """Read the answer to the request sent (skipping informational ones), whole by
        ``deadline`` (``time.monotonic()``; each read waits at most the timeout in any
        case); the connection is closed when the answer says so or ends with it."""
        self._deadline = deadline
        for _ in range(MAX_INFORMATIONAL + 1):
            status, version, fields = self._head()
            if not 100 <= status < 200:
                break
        else:
            raise MalformedAnswer(f"more than {MAX_INFORMATIONAL} informational answers")
        keep_alive = _keep_alive(version, fields.get(b"connection", b""))
        coding, lengths = fields.get(b"transfer-encoding"), fields.get(b"content-length")
        if status in _NO_BODY:
            body = b""
        elif coding is not None:
            if lengths is not None:
                raise MalformedAnswer("Content-Length together with Transfer-Encoding")
            if coding.strip(b" \t").lower() != b"chunked":
                raise MalformedAnswer(f"transfer coding {coding[:40]!r} is not chunked")
            body = self._chunked()
        elif lengths is not None:
            body = self._exactly(_length(lengths, self.max_body), "the body")
        else:
            body, keep_alive = self._until_closed(), False
        if self._buffer:  # bytes past the answer: not ours to read as the next one
            keep_alive = False
        if not keep_alive:
            self.close()
        return Answer(status, body, keep_alive)

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        self._buffer.clear()

    # -- internals -----------------------------------------------------------------

    def _connect(self) -> socket.socket:
        sock = socket.create_connection((self.host, self.port), timeout=self.timeout_s)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self._tls is not None:
                sock = self._tls.wrap_socket(sock, server_hostname=self._server_name)
        except BaseException:
            sock.close()
            raise
        self._buffer.clear()
        return sock

    def _fill(self) -> bool:
        """Receive what is there (waiting at most the timeout); False once closed."""
        if self._sock is None:
            return False
        if self._deadline is not None:
            left = self._deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("the answer did not come whole by its deadline")
            self._sock.settimeout(min(self.timeout_s, left))
        data = self._sock.recv(_RECV_BYTES)
        self._buffer += data
        return bool(data)

    def _head(self) -> tuple[int, str, dict[bytes, bytes]]:
        buffer = self._buffer
        searched = 0
        while (end := buffer.find(b"\r\n\r\n", searched)) < 0:
            if len(buffer) > MAX_HEAD_BYTES:
                _check_crlf(bytes(buffer))
                raise MalformedAnswer(f"a head over {MAX_HEAD_BYTES} bytes")
            searched = max(0, len(buffer) - 3)
            if not self._fill():
                if not buffer:
                    raise ConnectionResetError("the connection closed before an answer")
                _check_crlf(bytes(buffer))
                raise MalformedAnswer("the connection closed within the head")
        if end > MAX_HEAD_BYTES:
            raise MalformedAnswer(f"a head over {MAX_HEAD_BYTES} bytes")
        head = bytes(buffer[:end])
        del buffer[:end + 4]
        _check_crlf(head)
        lines = head.split(b"\r\n")
        status = _STATUS.fullmatch(lines[0])
        if status is None:
            raise MalformedAnswer(f"not an HTTP/1.x status line: {lines[0][:60]!r}")
        if status[1] not in (b"1.0", b"1.1"):
            raise MalformedAnswer(f"HTTP version {status[1].decode()} is not 1.0 or 1.1")
        return int(status[2]), status[1].decode(), _fields(lines[1:])

    def _line(self, limit: int) -> bytes:
        """The next CRLF-ended line (without its CRLF), at most ``limit`` bytes."""
        while (end := self._buffer.find(b"\r\n")) < 0:
            if len(self._buffer) > limit:
                raise MalformedAnswer(f"a chunk line over {limit} bytes")
            if not self._fill():
                raise MalformedAnswer("the connection closed within a chunked body")
        if end > limit:
            raise MalformedAnswer(f"a chunk line over {limit} bytes")
        line = bytes(self._buffer[:end])
        del self._buffer[:end + 2]
        return line

    def _exactly(self, count: int, what: str) -> bytes:
        while len(self._buffer) < count:
            if not self._fill():
                raise MalformedAnswer(f"the connection closed within {what} "
                                      f"({len(self._buffer)} of {count} bytes)")
        data = bytes(self._buffer[:count])
        del self._buffer[:count]
        return data

    def _chunked(self) -> bytes:
        body = bytearray()
        while True:
            size_text = self._line(1024).split(b";", 1)[0].strip(b" \t")
            if not _HEX.fullmatch(size_text):
                raise MalformedAnswer(f"a chunk size that is not hex: {size_text[:20]!r}")
            size = int(size_text, 16)
            if size == 0:
                break
            if len(body) + size > self.max_body:
                raise MalformedAnswer(f"an answer over {self.max_body} bytes")
            body += self._exactly(size, "a chunk")
            if self._exactly(2, "a chunk") != b"\r\n":
                raise MalformedAnswer("a chunk not ended by CRLF")
        trailer = []
        while line := self._line(MAX_HEAD_BYTES):
            trailer.append(line)
            if len(trailer) > MAX_FIELDS:
                raise MalformedAnswer(f"more than {MAX_FIELDS} trailer fields")
        _fields(trailer)
        return bytes(body)

    def _until_closed(self) -> bytes:
        while self._fill():
            if len(self._buffer) > self.max_body:
                raise MalformedAnswer(f"an answer over {self.max_body} bytes")
        body = bytes(self._buffer)
        self._buffer.clear()
        return body


def _check_crlf(head: bytes) -> None:
    """Refuse a head with a bare CR or LF (a line not ended by CRLF)."""
    crlf = head.count(b"\r\n")
    if head.count(b"\n") != crlf or head.count(b"\r") != crlf:
        raise MalformedAnswer("a line of the head not ended by CRLF")


def _fields(lines: list[bytes]) -> dict[bytes, bytes]:
    """The field lines by lower-case name (repeats joined with ``,``)."""
    if len(lines) > MAX_FIELDS:
        raise MalformedAnswer(f"more than {MAX_FIELDS} header fields")
    fields: dict[bytes, bytes] = {}
    for line in lines:
        if line[:1] in (b" ", b"\t"):
            raise MalformedAnswer(f"a folded field line: {line[:60]!r}")
        name, colon, value = line.partition(b":")
        if not colon or not _TOKEN.fullmatch(name):
            raise MalformedAnswer(f"not a field line: {line[:60]!r}")
        value = value.strip(b" \t")
        if _CONTROL.search(value):
            raise MalformedAnswer(f"a control character in field {name.decode()!r}")
        name = name.lower()
        fields[name] = fields[name] + b"," + value if name in fields else value
    return fields


def _length(value: bytes, limit: int) -> int:
    """A ``Content-Length`` (its repeats, comma-joined, must be one number)."""
    values = {part.strip(b" \t") for part in value.split(b",")}
    if len(values) != 1 or not _DIGITS.fullmatch(length := values.pop()):
        raise MalformedAnswer(f"Content-Length {value[:40]!r} is not one number")
    if int(length) > limit:
        raise MalformedAnswer(f"an answer over {limit} bytes")
    return int(length)


def _keep_alive(version: str, connection: bytes) -> bool:
    tokens = {token.strip(b" \t").lower() for token in connection.split(b",")}
    return b"keep-alive" in tokens if version == "1.0" else b"close" not in tokens
