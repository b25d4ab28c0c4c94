"""The plain progress hook a training job calls: its step, its durable checkpoint step
and the step it resumed from, exposed three ways gameday's ``verifiers.rpo`` reads.

1. **A log**, one line per event, appended and flushed at once (a SIGKILL loses no line
   written before it)::

       <unix seconds> gameday-progress start pid=<pid>     the process began
       <unix seconds> gameday-progress resumed <N>         it loaded step N (0: fresh)
       <unix seconds> gameday-progress step <N>            N optimizer steps are done
       <unix seconds> gameday-progress checkpoint <N>      a checkpoint of step N is durable

   ``checkpoint_loss(job_log=PATH)`` reads all four (:data:`PATTERNS`).
2. **Prometheus gauges** on ``/metrics`` (with ``metrics_port``; needs
   ``prometheus_client``): ``gameday_trainer_step``, ``gameday_trainer_checkpoint_step``
   and ``gameday_trainer_resumed_from_step``, the names ``checkpoint_loss`` reads by
   default, plus prometheus_client's ``process_start_time_seconds`` for its
   ``restart`` expression.
3. **HTTP JSON** on ``GET /progress`` (with ``http_port``): ``{"step": N,
   "checkpoint_step": M, "resumed_from_step": R, "pid": P}``, for
   ``progress_http: {url, field: step}``.

Only the process of global rank 0 (``RANK``, unset: 0) reports, so every rank of a
torchrun job may call it. Settings come from the arguments or, for what is not given,
from the environment: ``GAMEDAY_PROGRESS_LOG``, ``GAMEDAY_PROGRESS_METRICS_PORT``,
``GAMEDAY_PROGRESS_HTTP_PORT`` (with ``GAMEDAY_PROGRESS_ADDR``, default ``127.0.0.1``).
"""

import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import IO, Any

__all__ = ["EVENTS", "PATTERNS", "ProgressReporter"]

#: The words of the log's events.
EVENTS = ("start", "resumed", "step", "checkpoint")
_PREFIX = r"^(?P<t>\d+\.\d+) gameday-progress "
#: The regular expressions ``verifiers.rpo`` reads the log with, by use.
PATTERNS = {
    "progress": _PREFIX + r"step (?P<step>\d+)$",
    "resumed": _PREFIX + r"resumed (?P<step>\d+)$",
    "restart": _PREFIX + r"start pid=\d+$",
    "durable": _PREFIX + r"checkpoint (?P<step>\d+)$",
}


def _env_int(name: str) -> int | None:
    text = os.environ.get(name)
    if not text:
        return None
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"{name}={text!r} is not a port number") from None


class ProgressReporter:
    """One job process's progress, reported through the channels it was given.

    ``step``, ``checkpointed`` and ``resumed`` may be called from any thread; each
    writes its log line before it returns. :meth:`close` stops the servers."""

    def __init__(self, log_path: str | None = None, *, metrics_port: int | None = None,
                 http_port: int | None = None, addr: str | None = None,
                 rank: int | None = None) -> None:
        self.rank = int(os.environ.get("RANK", "0")) if rank is None else rank
        self.log_path = log_path or os.environ.get("GAMEDAY_PROGRESS_LOG") or None
        metrics_port = metrics_port if metrics_port is not None else \
            _env_int("GAMEDAY_PROGRESS_METRICS_PORT")
        http_port = http_port if http_port is not None else \
            _env_int("GAMEDAY_PROGRESS_HTTP_PORT")
        addr = addr or os.environ.get("GAMEDAY_PROGRESS_ADDR") or "127.0.0.1"
        self.state: dict[str, int | None] = {"step": None, "checkpoint_step": None,
                                             "resumed_from_step": None}
        self._lock = threading.Lock()
        self._log: IO[str] | None = None
        self._gauges: dict[str, Any] = {}
        self._http: ThreadingHTTPServer | None = None
        if self.rank != 0:
            return
        if self.log_path:
            self._log = open(self.log_path, "a", buffering=1)  # noqa: SIM115 (held open)
        if metrics_port is not None:
            self._start_metrics(metrics_port, addr)
        if http_port is not None:
            self._start_http(http_port, addr)
        self._write("start", f"pid={os.getpid()}")

    @property
    def reporting(self) -> bool:
        """Whether this process reports (it is rank 0)."""
        return self.rank == 0

    def _start_metrics(self, port: int, addr: str) -> None:
        from prometheus_client import Gauge, start_http_server

        self._gauges = {
            "step": Gauge("gameday_trainer_step", "optimizer steps done"),
            "checkpoint_step": Gauge("gameday_trainer_checkpoint_step",
                                     "the step of the newest durable checkpoint"),
            "resumed_from_step": Gauge("gameday_trainer_resumed_from_step",
                                       "the step this process loaded (0: a fresh start)"),
        }
        start_http_server(port, addr=addr)

    def _start_http(self, port: int, addr: str) -> None:
        reporter = self

        class Progress(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.split("?")[0] != "/progress":
                    self.send_error(404)
                    return
                with reporter._lock:
                    body = json.dumps({**reporter.state, "pid": os.getpid()}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                return

        self._http = ThreadingHTTPServer((addr, port), Progress)
        self._http.daemon_threads = True
        threading.Thread(target=self._http.serve_forever, daemon=True,
                         name="gameday-progress-http").start()

    def _write(self, event: str, value: str) -> None:
        if self._log is not None:
            self._log.write(f"{time.time():.6f} gameday-progress {event} {value}\n")
            self._log.flush()

    def _set(self, event: str, step: int, *keys: str) -> None:
        """Set ``keys`` of the state (and their gauges) to ``step``, then log ``event``."""
        if not self.reporting:
            return
        with self._lock:
            for key in keys:
                self.state[key] = step
                if key in self._gauges:
                    self._gauges[key].set(step)
            self._write(event, str(step))

    def resumed(self, step: int) -> None:
        """The process loaded the checkpoint of ``step`` (0: it starts afresh); its
        progress is ``step`` until its first new step."""
        self._set("resumed", step, "resumed_from_step", "step")

    def step(self, step: int) -> None:
        """``step`` optimizer steps are done."""
        self._set("step", step, "step")

    def checkpointed(self, step: int) -> None:
        """A checkpoint of ``step`` is complete on the store (call it after the save)."""
        self._set("checkpoint", step, "checkpoint_step")

    def close(self) -> None:
        """Stop the HTTP server and close the log (the gauges' server is a daemon)."""
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
            self._http = None
        if self._log is not None:
            self._log.close()
            self._log = None
