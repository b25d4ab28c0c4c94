"""The head of one agent answer (status line and header fields) put together at once.

The stdlib's :class:`http.server.BaseHTTPRequestHandler` builds an answer's head a piece
at a time (``send_response``, a ``send_header`` call per field, ``end_headers``), each
piece formatted and encoded on its own, and looks up the status phrase and the date on
the way. Every agent answer carries the same few fields, so :func:`answer_head` writes
them in one string, in the order the stdlib's handler does: ``Server``, ``Date``,
``Content-Type``, ``Content-Length``, any ``extra`` fields, then ``Connection: close``
when the connection ends after the answer.
"""

import email.utils
import time
from collections.abc import Callable, Mapping
from http import HTTPStatus
from typing import Final

__all__ = ["CONTINUE", "SERVER", "HttpDate", "answer_head"]

#: The ``Server`` field of every answer.
SERVER: Final = "gameday-agent/1"
#: The interim answer to ``Expect: 100-continue``.
CONTINUE: Final = b"HTTP/1.1 100 Continue\r\n\r\n"

_STATUS_LINES: Final = {int(status): f"HTTP/1.1 {int(status)} {status.phrase}\r\n"
                        for status in HTTPStatus}


class HttpDate:
    """The current time as an HTTP ``Date`` (``Sun, 06 Nov 1994 08:49:37 GMT``) from
    ``wall_clock`` (seconds since the epoch: :func:`time.time`, or a test clock's ``now``),
    formatted once a second, not for every answer as the stdlib's handler does. Threads
    share it: the ``(second, text)`` pair is replaced whole, so a reader never sees half
    of one."""

    def __init__(self, wall_clock: Callable[[], float] = time.time) -> None:
        self._wall_clock = wall_clock
        self._current: tuple[int, str] = (-1, "")

    def now(self) -> str:
        second = int(self._wall_clock())
        current = self._current
        if current[0] != second:
            current = (second, email.utils.formatdate(second, usegmt=True))
            self._current = current
        return current[1]


def answer_head(status: int, content_type: str, length: int, date: str, *,
                extra: Mapping[str, str] | None = None, close: bool = False) -> bytes:
    """``HTTP/1.1 {status} {phrase}`` and the header fields of an answer whose body is
    ``length`` bytes of ``content_type``, up to and with the empty line; ``extra``
    fields (``Allow``, ``WWW-Authenticate``) after ``Content-Length``; ``close``: add
    ``Connection: close``. Names and values are ISO-8859-1 text without line breaks."""
    line = _STATUS_LINES.get(status) or f"HTTP/1.1 {status} \r\n"
    head = (f"{line}Server: {SERVER}\r\nDate: {date}\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {length}\r\n")
    if extra:
        head += "".join([f"{name}: {value}\r\n" for name, value in extra.items()])
    if close:
        head += "Connection: close\r\n"
    return (head + "\r\n").encode("latin-1")
