"""A lean reader of an HTTP/1.x request head (request line and header fields).

The stdlib's :meth:`http.server.BaseHTTPRequestHandler.parse_request` parses the
header fields with the :mod:`email` feed parser, which costs more than the rest of a
small agent request. The agent's handler reads the head with :func:`read_request_head`
instead: the same bounds as the stdlib (a line of at most 64 KiB, at most 100 fields),
stricter about what it accepts (a field line without a colon, a name with blanks, an
obsolete folded line are refused, RFC 9112 §5). A head that is already buffered whole
(a small request comes in one read) is taken in one piece and split at its line ends;
any other is read line by line (:func:`read_header_fields`), with the same answers. The
fields land in a plain ``dict`` keyed by lower-case name (cheaper than the stdlib's
:class:`http.client.HTTPMessage`); of a field sent more than once the first value counts,
as ``HTTPMessage.get`` would answer.
"""

from typing import Final, NamedTuple, Protocol

__all__ = ["MAX_FIELDS", "MAX_LINE_BYTES", "BadRequestHead", "HeadReader", "LineReader",
           "RequestHead", "RequestLine", "parse_request_line", "read_header_fields",
           "read_request_head"]

#: The longest request line or header field line read, in bytes (as the stdlib).
MAX_LINE_BYTES: Final = 65536
#: The most header fields a request may carry (as the stdlib).
MAX_FIELDS: Final = 100
#: Whether the versions clients send keep a connection open by default.
_KEEP_ALIVE: Final = {"HTTP/1.1": True, "HTTP/1.0": False}


class BadRequestHead(Exception):
    """The request head cannot be understood: answer ``status`` with ``message``, close
    (the agent's handler errors are of this kind too, with fields of their own)."""

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


class RequestHead(NamedTuple):
    """A request's line and its header fields (by lower-case name)."""

    line: RequestLine
    fields: dict[str, str]


class LineReader(Protocol):
    """Where header field lines are read from (the handler's ``rfile``)."""

    def readline(self, size: int | None = ..., /) -> bytes: ...


class HeadReader(LineReader, Protocol):
    """Where a whole head is read from: a buffered reader (the handler's ``rfile``)."""

    def peek(self, size: int = ..., /) -> bytes: ...

    def read(self, size: int | None = ..., /) -> bytes: ...


def read_request_head(rfile: HeadReader) -> RequestHead | None:
    """The next request's head, ``None`` if the connection ended before one;
    :class:`BadRequestHead` as :func:`parse_request_line` and :func:`read_header_fields`
    say, and (414) for a request line over :data:`MAX_LINE_BYTES`."""
    lines = _take_buffered_head(rfile)
    if lines is not None:
        return RequestHead(parse_request_line(lines[0].rstrip("\r")),
                           _parse_fields(lines[1:]))
    raw = rfile.readline(MAX_LINE_BYTES + 1)
    if not raw:
        return None
    if len(raw) > MAX_LINE_BYTES:
        raise BadRequestHead(414, "Request-URI Too Long")
    line = parse_request_line(raw.decode("iso-8859-1").rstrip("\r\n"))
    return RequestHead(line, read_header_fields(rfile))


def _take_buffered_head(rfile: HeadReader) -> list[str] | None:
    """The head's lines (request line first, without line ends) if ``rfile`` holds all of
    it up to its empty line, which is consumed too; else ``None``, nothing consumed.
    Waits for the first bytes of a request if none are buffered."""
    buffered = rfile.peek(1)
    crlf, lf = buffered.find(b"\n\r\n"), buffered.find(b"\n\n")  # the \n ending a line
    if lf >= 0 and (crlf < 0 or lf < crlf):
        end, size = lf, lf + 2
    elif crlf >= 0:
        end, size = crlf, crlf + 3
    else:
        return None
    if size > MAX_LINE_BYTES:  # never in one buffer; the line reader has the bounds
        return None
    return rfile.read(size)[:end].decode("iso-8859-1").split("\n")


def parse_request_line(text: str) -> RequestLine:
    """Parse a request line (decoded as ISO-8859-1, without its CRLF);
    :class:`BadRequestHead` if malformed (400; HTTP/0.9 lines without a version are
    refused too) or of HTTP/2 and up (505)."""
    words = text.split()
    if len(words) != 3:
        raise BadRequestHead(400, f"bad request line {text[:100]!r}; expected "
                             "'METHOD /path HTTP/1.1'")
    command, path, version = words
    if path.startswith("//"):  # never an absolute URI without scheme (gh-87389)
        path = "/" + path.lstrip("/")
    keep_alive = _KEEP_ALIVE.get(version)
    if keep_alive is not None:
        return RequestLine(command, path, version, keep_alive)
    major, dot, minor = version[5:].partition(".")
    if (not version.startswith("HTTP/") or not dot or not major.isdigit()
            or not minor.isdigit() or len(major) > 10 or len(minor) > 10):
        raise BadRequestHead(400, f"bad HTTP version {version[:40]!r}")
    number = (int(major), int(minor))
    if number >= (2, 0):
        raise BadRequestHead(505, f"HTTP version {version[5:40]} is not supported; "
                             "use HTTP/1.1")
    return RequestLine(command, path, version, number >= (1, 1))


def read_header_fields(rfile: LineReader) -> dict[str, str]:
    """Read header field lines up to the empty line that ends them: ``{lower-case name:
    value}``, the first value of a repeated name; :class:`BadRequestHead` (431) for a
    line over :data:`MAX_LINE_BYTES` or more than :data:`MAX_FIELDS` fields, (400) for a
    malformed line or a head cut short (whichever comes first in the head)."""
    lines: list[str] = []
    while True:
        line = rfile.readline(MAX_LINE_BYTES + 1)
        if line in (b"\r\n", b"\n"):
            return _parse_fields(lines)
        if len(line) > MAX_LINE_BYTES:
            failure = BadRequestHead(431, f"a header line is over {MAX_LINE_BYTES} bytes")
        elif not line.endswith(b"\n"):
            failure = BadRequestHead(400, "the request head ended before its empty line")
        elif len(lines) == MAX_FIELDS:
            failure = BadRequestHead(431, f"more than {MAX_FIELDS} header fields")
        else:
            lines.append(line.decode("iso-8859-1"))
            continue
        _parse_fields(lines)  # a malformed line before this one is answered first
        raise failure


def _parse_fields(lines: list[str]) -> dict[str, str]:
    """The fields of header field lines (with or without their line ends), checked in
    order; at most :data:`MAX_FIELDS` of them."""
    fields: dict[str, str] = {}
    for text in lines[:MAX_FIELDS]:
        name, colon, value = text.partition(":")
        if not colon or not name or " " in name or "\t" in name:  # a blank first, too
            raise BadRequestHead(400, f"bad header line {text[:60].rstrip()!r}")
        if (key := name.lower()) not in fields:
            fields[key] = value.strip(" \t\r\n")
    if len(lines) > MAX_FIELDS:
        raise BadRequestHead(431, f"more than {MAX_FIELDS} header fields")
    return fields
