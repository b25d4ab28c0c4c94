"""Safeguards: tolerance logic on a fake clock, real HTTP measurements, and a real
signal interrupting the main thread when a safeguard breaches."""

import http.server
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from gameday.clock import FakeClock
from gameday.errors import InvalidInput
from gameday.experiment.extension import SafeguardSpec, parse_extension
from gameday.safety import signals
from gameday.safety.safeguards import SafeguardBreached, SafeguardWatch, Unmeasurable, measure


class _Flip(http.server.BaseHTTPRequestHandler):
    status = 200

    def do_GET(self) -> None:
        body = b'{"queue": {"depth": 7}}'
        self.send_response(type(self).status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Flip)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    _Flip.status = 200
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()


def test_extension_declares_safeguards_with_paths() -> None:
    parsed = parse_extension({"extensions": [{"name": "gameday", "safeguards": [
        {"name": "ok", "http": "${service_url}/healthz", "equals": 200, "interval_s": 0.5}]}]})
    assert parsed.safeguards[0].equals == 200 and parsed.safeguards[0].interval_s == 0.5
    for bad, where in (({"name": "x", "http": "u"}, "safeguards[0]"),
                       ({"name": "x", "http": "u", "promql": "q", "max": 1}, "safeguards[0]"),
                       ({"name": "x", "http": "u", "max": "lots"}, "safeguards[0].max"),
                       ({"name": "x", "http": "u", "max": 1, "typo": 1}, "safeguards[0].typo")):
        with pytest.raises(InvalidInput) as error:
            parse_extension({"extensions": [{"name": "gameday", "safeguards": [bad]}]})
        assert error.value.path == f"extensions[0].{where}"


def test_tolerance_and_interval_on_a_fake_clock() -> None:
    clock = FakeClock()
    values = iter([0.01, 0.02, 0.2])
    spec = SafeguardSpec(name="errors", promql="q", max=0.05, interval_s=1.0)
    watch = SafeguardWatch((spec,), {}, clock=clock, measure_one=lambda s, c: next(values))
    assert watch.check_due() is None and watch.checks == 1
    assert watch.check_due() is None and watch.checks == 1  # not due yet
    clock.advance(1.0)
    assert watch.check_due() is None and watch.checks == 2
    clock.advance(1.0)
    assert watch.check_due() == "safeguard errors breached: measured 0.2 > max 0.05"


def test_unmeasurable_breaches_after_failures_in_a_row() -> None:
    clock = FakeClock()

    def broken(spec: SafeguardSpec, configuration: Mapping[str, Any]) -> float:
        raise Unmeasurable("no series")

    watch = SafeguardWatch((SafeguardSpec(name="g", promql="q", min=1, failures=2),), {},
                           clock=clock, measure_one=broken)
    assert watch.check_due() is None
    clock.advance(1)
    assert "2 checks in a row could not measure (no series)" in str(watch.check_due())


def test_http_measurements(server: str) -> None:
    status = SafeguardSpec(name="up", http="${base}/healthz", equals=200)
    depth = SafeguardSpec(name="depth", http=f"{server}/q", json="queue.depth", max=5)
    assert measure(status, {"base": server}) == 200.0
    assert measure(depth, {}) == 7.0
    _Flip.status = 503
    assert measure(status, {"base": server}) == 503.0
    with pytest.raises(Unmeasurable):
        measure(SafeguardSpec(name="p", promql="up", max=1), {})


def test_a_breach_interrupts_the_main_thread(server: str) -> None:
    """A real background thread, a real SIGUSR1 to the main thread, a real HTTP flip."""
    signals.reset()
    spec = SafeguardSpec(name="router-up", http=f"{server}/healthz", equals=200,
                         interval_s=0.1)
    watch = SafeguardWatch((spec,), {})
    started = time.monotonic()
    assert watch.start()
    try:
        with pytest.raises(SafeguardBreached) as breached:
            threading.Timer(0.3, lambda: setattr(_Flip, "status", 500)).start()
            time.sleep(20)
    finally:
        watch.stop()
    assert time.monotonic() - started < 10
    assert str(breached.value) == "safeguard router-up breached: measured 500, expected 200"
    assert breached.value.exit_code == 1 and signals.STATE.received is None


def test_a_breach_during_cleanup_does_not_raise(tmp_path: Path) -> None:
    spec = SafeguardSpec(name="never", http="http://127.0.0.1:9/", equals=200, interval_s=0.05,
                         failures=1)
    watch = SafeguardWatch((spec,), {})
    with signals.deferred():
        watch.start()
        deadline = time.monotonic() + 10
        while watch.breach is None and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.1)
    watch.stop()
    assert watch.breach is not None and "could not measure" in watch.breach
