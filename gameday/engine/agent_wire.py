"""HTTP/1.1 on one kept-alive connection, as the agent client speaks it.

A request goes out in ONE write (request line, headers and body together: no small
second segment for Nagle's algorithm to hold back); an answer is read from the
connection's buffered reader: status line, headers, then a body framed by
``Content-Length``, by ``Transfer-Encoding: chunked``, or by the end of the connection.
Informational (``1xx``) answers are skipped. Header names are case-insensitive; limits
on line length, header count and body size keep a misbehaving peer from making the
client read without end.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import BinaryIO, Final

__all__ = ["MAX_ANSWER_BYTES", "Answer", "MalformedAnswer", "PeerClosed", "read_answer",
           "request_bytes"]

MAX_LINE: Final = 65_536
MAX_HEADERS: Final = 100
MAX_ANSWER_BYTES: Final = 64 * 1024 * 1024


class PeerClosed(ConnectionError):
    """The connection ended before an answer began (a kept-alive connection that the
    peer had closed: the request was not seen)."""


class MalformedAnswer(ValueError):
    """The answer does not follow HTTP/1.1 (or passes the limits)."""


@dataclass(frozen=True)
class Answer:
    status: int
    headers: dict[str, str]  # names in lower case
    body: bytes
    will_close: bool  # the peer closes the connection after this answer


def request_bytes(method: str, host: str, path: str, headers: Mapping[str, str],
                  body: bytes | None) -> bytes:
    """The whole request, ready for one write."""
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    if body is not None:
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (body or b"")


def read_answer(rfile: BinaryIO) -> Answer:
    """Read one answer; :class:`PeerClosed` if the connection ended before it began."""
    while True:
        first = rfile.readline(MAX_LINE + 1)
        if not first:
            raise PeerClosed("the connection was closed before an answer")
        version, status = _status_line(first)
        headers = _headers(rfile)
        if not 100 <= status < 200:
            break
    if status in (204, 304):
        body = b""
    elif "chunked" in headers.get("transfer-encoding", "").lower():
        body = _chunked(rfile)
    elif "content-length" in headers:
        body = _exactly(rfile, _length(headers["content-length"]))
    else:
        body = rfile.read(MAX_ANSWER_BYTES + 1)
        if len(body) > MAX_ANSWER_BYTES:
            raise MalformedAnswer(f"answer larger than {MAX_ANSWER_BYTES} bytes")
        return Answer(status, headers, body, will_close=True)
    connection = headers.get("connection", "").lower()
    will_close = "close" in connection or (version == "HTTP/1.0"
                                           and "keep-alive" not in connection)
    return Answer(status, headers, body, will_close)


def _status_line(line: bytes) -> tuple[str, int]:
    if len(line) > MAX_LINE:
        raise MalformedAnswer("status line too long")
    parts = line.decode("latin-1").rstrip("\r\n").split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
        raise MalformedAnswer(f"not an HTTP status line: {line[:60]!r}")
    return parts[0], int(parts[1])


def _headers(rfile: BinaryIO) -> dict[str, str]:
    headers: dict[str, str] = {}
    for _ in range(MAX_HEADERS + 1):
        line = rfile.readline(MAX_LINE + 1)
        if len(line) > MAX_LINE:
            raise MalformedAnswer("header line too long")
        if line in (b"\r\n", b"\n"):
            return headers
        if not line:
            raise MalformedAnswer("the connection ended in the headers")
        name, colon, value = line.decode("latin-1").partition(":")
        if not colon:
            raise MalformedAnswer(f"not a header: {line[:60]!r}")
        key = name.strip().lower()
        value = value.strip()
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
    raise MalformedAnswer(f"more than {MAX_HEADERS} headers")


def _length(text: str) -> int:
    if not text.strip().isdigit():
        raise MalformedAnswer(f"bad Content-Length {text!r}")
    length = int(text)
    if length > MAX_ANSWER_BYTES:
        raise MalformedAnswer(f"answer larger than {MAX_ANSWER_BYTES} bytes")
    return length


def _exactly(rfile: BinaryIO, length: int) -> bytes:
    data = rfile.read(length)
    if len(data) != length:
        raise MalformedAnswer(f"the connection ended {length - len(data)} bytes early")
    return data


def _chunked(rfile: BinaryIO) -> bytes:
    parts: list[bytes] = []
    total = 0
    while True:
        size_line = rfile.readline(MAX_LINE + 1).split(b";", 1)[0].strip()
        try:
            size = int(size_line, 16)
        except ValueError:
            raise MalformedAnswer(f"bad chunk size {size_line[:20]!r}") from None
        if size == 0:
            _headers(rfile)  # trailers, up to the blank line
            return b"".join(parts)
        total += size
        if total > MAX_ANSWER_BYTES:
            raise MalformedAnswer(f"answer larger than {MAX_ANSWER_BYTES} bytes")
        parts.append(_exactly(rfile, size))
        if _exactly(rfile, 2) != b"\r\n":
            raise MalformedAnswer("a chunk does not end with CRLF")
