"""A lean reader of an HTTP/1.x request head (request line and header fields).

The stdlib's :meth:`http.server.BaseHTTPRequestHandler.parse_request` parses the
header fields with the :mod:`email` feed parser, which costs more than the rest of a
small agent request. The agent's handler reads the head with :func:`parse_request_line`
and :func:`read_header_fields` instead: the same bounds as the stdlib (a line of at most
64 KiB, at most 100 fields), stricter about what it accepts (a field line without a
colon, a name with blanks, an obsolete folded line are refused, RFC 9112 §5), and the
fields land in an :class:`http.client.HTTPMessage` (case-insensitive ``get``), as the
stdlib's would.
"""

import http.client
from typing import Final, NamedTuple, Protocol

__all__ = ["MAX_FIELDS", "MAX_LINE_BYTES", "BadRequestHead", "LineReader", "RequestLine",
           "parse_request_line", "read_header_fields"]

#: The longest request line or header field line read, in bytes (as the stdlib).
MAX_LINE_BYTES: Final = 65536
#: The most header fields a request may carry (as the stdlib).
MAX_FIELDS: Final = 100
_BLANKS: Final = frozenset(" \t")


class BadRequestHead(Exception):
    """The request head cannot be understood: answer ``status`` with ``message``, close."""

    def __init__(self, status: int, message: str) -> None:
        self.status = status
        self.message = message
        super().__init__(message)


class RequestLine(NamedTuple):
    """``METHOD target HTTP/x.y``; ``keep_alive``: the version's default (1.1 and up)."""

    command: str
    path: str
    version: str
    keep_alive: bool


class LineReader(Protocol):
    """Where the head is read from (the handler's ``rfile``)."""

    def readline(self, size: int | None = ..., /) -> bytes: ...


def parse_request_line(text: str) -> RequestLine:
    """Parse a request line (decoded as ISO-8859-1, without its CRLF);
    :class:`BadRequestHead` if malformed (400; HTTP/0.9 lines without a version are
    refused too) or of HTTP/2 and up (505)."""
    words = text.split()
    if len(words) != 3:
        raise BadRequestHead(400, f"bad request line {text[:100]!r}; expected "
                             "'METHOD /path HTTP/1.1'")
    command, path, version = words
    major, dot, minor = version[5:].partition(".")
    if (not version.startswith("HTTP/") or not dot or not major.isdigit()
            or not minor.isdigit() or len(major) > 10 or len(minor) > 10):
        raise BadRequestHead(400, f"bad HTTP version {version[:40]!r}")
    number = (int(major), int(minor))
    if number >= (2, 0):
        raise BadRequestHead(505, f"HTTP version {version[5:40]} is not supported; "
                             "use HTTP/1.1")
    if path.startswith("//"):  # never an absolute URI without scheme (gh-87389)
        path = "/" + path.lstrip("/")
    return RequestLine(command, path, version, number >= (1, 1))


def read_header_fields(rfile: LineReader) -> http.client.HTTPMessage:
    """Read header field lines up to the empty line that ends them; :class:`BadRequestHead`
    (431) for a line over :data:`MAX_LINE_BYTES` or more than :data:`MAX_FIELDS` fields,
    (400) for a malformed line or a head cut short."""
    fields = http.client.HTTPMessage()
    count = 0
    while True:
        line = rfile.readline(MAX_LINE_BYTES + 1)
        if len(line) > MAX_LINE_BYTES:
            raise BadRequestHead(431, f"a header line is over {MAX_LINE_BYTES} bytes")
        if line in (b"\r\n", b"\n"):
            return fields
        if not line.endswith(b"\n"):
            raise BadRequestHead(400, "the request head ended before its empty line")
        count += 1
        if count > MAX_FIELDS:
            raise BadRequestHead(431, f"more than {MAX_FIELDS} header fields")
        text = line.decode("iso-8859-1")
        name, colon, value = text.partition(":")
        if not colon or not name or text[0] in _BLANKS or not _BLANKS.isdisjoint(name):
            raise BadRequestHead(400, f"bad header line {text[:60].rstrip()!r}")
        fields[name] = value.strip(" \t\r\n")
