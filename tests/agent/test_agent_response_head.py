"""Answer heads made in one piece (gameday/agent/response_head.py): the exact bytes, and the
``Date`` made once a second from an injectable clock (a FakeClock's, so no waiting)."""

from gameday.agent.response_head import CONTINUE, HttpDate, answer_head
from gameday.clock import FakeClock

DATE = "Sun, 06 Nov 1994 08:49:37 GMT"


def test_a_head_has_the_status_line_then_the_fields_in_the_stdlib_order() -> None:
    assert answer_head(201, "application/json", 12, DATE) == (
        b"HTTP/1.1 201 Created\r\nServer: gameday-agent/1\r\n"
        b"Date: Sun, 06 Nov 1994 08:49:37 GMT\r\nContent-Type: application/json\r\n"
        b"Content-Length: 12\r\n\r\n")
    assert answer_head(405, "application/json", 0, DATE, extra={"Allow": "GET, POST"},
                       close=True).endswith(
        b"\r\nContent-Length: 0\r\nAllow: GET, POST\r\nConnection: close\r\n\r\n")
    assert answer_head(599, "text/plain", 1, DATE).startswith(b"HTTP/1.1 599 \r\n")
    assert CONTINUE == b"HTTP/1.1 100 Continue\r\n\r\n"


def test_the_date_is_formatted_once_a_second_from_the_clock() -> None:
    clock = FakeClock(start=784111777.25)
    date = HttpDate(clock.now)
    first = date.now()
    assert first == DATE
    clock.advance(0.5)
    assert date.now() is first  # the same second: the text made before
    clock.advance(1.0)
    assert date.now() == "Sun, 06 Nov 1994 08:49:38 GMT"
