"""An independent ground truth for RTO measurements against real servers: a prober of
the tests' own (not gameday's recorder, not its HTTP client) that sends a request every
5 ms on a fresh connection, up to 256 at once (so a server that holds requests does not
slow its cadence), and keeps each request's send time, arrival time and whether its
answer was correct (200, the expected text in the body, within ``correct_within_s``).

:meth:`DenseProber.truth` is when correct answers arrived again for good: the earliest
arrival of a correct answer after the send of the last incorrect one (every request
sent after it was answered correctly). The server was not whole when it took that last
failed request, and was answering in time when that answer came back: its own recovery
instant, to within a request's healthy latency, whatever the outage: refused
connections, held requests (the first request the server answers on release arrives
at the release; those held longer than ``correct_within_s`` count as incorrect), or
added latency.

A server that drains what it held over a while and not in order (Ray Serve's proxy
retries each held request on its own backoff as new replicas come up) answers some
requests within ``correct_within_s`` and, a moment later, fails one sent after them:
then which failures a client sees depends on which requests it sent, and a prober can
miss the last. :meth:`truth` therefore also takes the requests of the other client
watching the same server (gameday's recorder): a request either saw fail was a real
failure of the server, so the truth is after the last failure seen by anyone; the
answer that proves recovery is still the prober's own.
"""

import http.client
import threading
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

PROBE_INTERVAL_S = 0.005


@dataclass(frozen=True)
class Sample:
    sent: float
    done: float
    correct: bool
    body: str = ""


class DenseProber:
    """Probes ``url`` (GET, or POST ``body``) every ``every_s`` (5 ms) with at most
    ``in_flight`` requests open (256) until closed."""

    def __init__(
        self,
        url: str,
        *,
        correct_within_s: float,
        expect: str = "",
        body: bytes | None = None,
        give_up_s: float = 1.0,
        every_s: float = PROBE_INTERVAL_S,
        in_flight: int = 256,
    ) -> None:
        parts = urlsplit(url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.path = parts.path or "/"
        self.body, self.expect = body, expect
        self.correct_within_s, self.give_up_s = correct_within_s, give_up_s
        self.every_s = every_s
        self.samples: list[Sample] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._pool = ThreadPoolExecutor(max_workers=in_flight, thread_name_prefix="truth")
        self._busy = threading.BoundedSemaphore(in_flight)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _probe(self, sent: float) -> None:
        correct, text = False, ""
        try:
            conn = http.client.HTTPConnection(self.host, self.port, timeout=self.give_up_s)
            try:
                headers: dict[str, Any] = {"Connection": "close"}
                if self.body is not None:
                    headers["Content-Type"] = "application/json"
                conn.request(
                    "POST" if self.body is not None else "GET",
                    self.path,
                    body=self.body,
                    headers=headers,
                )
                answer = conn.getresponse()
                text = answer.read().decode(errors="replace")
                correct = answer.status == 200 and self.expect in text
            finally:
                conn.close()
        except (OSError, http.client.HTTPException):
            correct = False
        done = time.time()
        correct = correct and done - sent <= self.correct_within_s
        with self._lock:
            self.samples.append(Sample(sent, done, correct, text if correct else ""))
        self._busy.release()

    def _run(self) -> None:
        started = time.monotonic()
        tick = 0
        while not self._stop.is_set():
            if self._busy.acquire(blocking=False):
                self._pool.submit(self._probe, time.time())
            tick += 1
            self._stop.wait(max(0.0, started + tick * self.every_s - time.monotonic()))

    def truth(self, onset: float, also: Iterable[Sample] = ()) -> float:
        """The earliest arrival of a correct answer to one of the prober's requests
        after the send of the last incorrect request since ``onset``, the prober's or
        one of ``also`` (another client's: only its failures count, never its answers)
        (AssertionError if the prober never saw the server fail, or none came back)."""
        return self.bounds(onset, also)[1]

    def bounds(self, onset: float, also: Iterable[Sample] = ()) -> tuple[float, float]:
        """Where the server's recovery lies, as this prober (with ``also``'s failures)
        knows it: after the send of the last incorrect request (the server was not
        whole when that request reached it) and no later than :meth:`truth` (a correct
        answer had come back). The prober's own resolution: its cadence and a request's
        latency."""
        with self._lock:
            own = [s for s in self.samples if s.sent >= onset]
        assert any(not s.correct for s in own), "the prober never saw the server fail"
        last_bad = max(s.sent for s in [*own, *also] if not s.correct and s.sent >= onset)
        good = [s.done for s in own if s.correct and s.done > last_bad]
        assert good, "the prober never saw the server come back"
        return last_bad, min(good)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._pool.shutdown(wait=True, cancel_futures=True)


def recorded(readings: Iterable[Any]) -> list[Sample]:
    """gameday's recorder readings (``t``, ``done_at``, ``ok``) as samples."""
    return [Sample(r.t, r.done_at, r.ok) for r in readings]


def errors(result: dict[str, Any], truth: float) -> dict[str, float]:
    """gameday's interval against the truth: ``high`` = U - truth, ``low`` = truth - L
    (both >= 0 when the interval holds it), and the estimate's error."""
    low, high = result["recovered_between"]
    return {
        "high": round(high - truth, 4),
        "low": round(truth - low, 4),
        "estimate": round(result["recovered_at"] - truth, 4),
    }


def assert_holds(result: dict[str, Any], truth: float, readings: Iterable[Any],
                 prober: DenseProber, since: float) -> None:
    """The recovery as the prober knows it (after ``since``, the last failure's send, and
    by ``truth``) can lie in gameday's ``recovered_between`` (1 ms of rounding): the two
    intervals meet. Both hold the server's real instant; the prober's is one cadence
    and a latency wide, so gameday's upper bound may come a few milliseconds before the
    prober's first good answer (its request went out sooner) but never before its last
    failure, and its lower bound never after the prober's recovery. If not, print both
    clients' requests around it first (pytest cuts a long message)."""
    low, high = result["recovered_between"]
    if low - 1e-3 <= truth and since <= high + 1e-3:
        return
    print("gameday's requests (sent, ok, done, from the truth):",
          [(round(r.t - truth, 3), r.ok, round(r.done_at - truth, 3), r.error)
           for r in readings if low - 1.5 <= r.t <= high + 1.5])
    print("the prober's:", [(round(p.sent - truth, 3), p.correct, round(p.done - truth, 3))
                            for p in prober.samples if low - 1.5 <= p.sent <= high + 1.5])
    raise AssertionError(f"the truth [{since:.3f}, {truth:.3f}] is outside "
                         f"[{low:.3f}, {high:.3f}]: {errors(result, truth)}")
