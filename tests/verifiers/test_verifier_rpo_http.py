"""checkpoint_loss with progress from a job's own HTTP/JSON endpoint, sampled by the
run's SLI recorder: a real toy trainer process (tests/verifiers/toy_trainer.py) killed
with SIGKILL and started again, its ground truth read from its own log."""

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from chaoslib.exceptions import ActivityFailed

from gameday.engine.recorder import Recorder
from gameday.engine.session import deactivate
from gameday.httpclient import HttpRequest, send
from tests.verifiers.verifier_helpers import free_port, new_session, only_result, record_fault
from tests.waiting import wait_until
from verifiers.rpo import checkpoint_loss
from verifiers.sli import json_field, recorder_for

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class ToyTrainer:
    """The toy trainer process and its ground truth."""

    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="toy-trainer-")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/progress"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.verifiers.toy_trainer", "--port", str(self.port),
             "--dir", self.dir], cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT})
        wait_until(lambda: send(HttpRequest(self.url, timeout_s=0.5)).ok, 20,
                   "the toy trainer's /progress")

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)

    def truth(self) -> list[tuple[str, int]]:
        with open(os.path.join(self.dir, "truth.log")) as handle:
            return [(word, int(number)) for word, number in
                    (line.split() for line in handle if line.strip())]

    def close(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.kill()


@contextmanager
def trainer_and_recorder(interval_s: float) -> Iterator[tuple[ToyTrainer, Recorder]]:
    trainer = ToyTrainer()
    session = new_session()
    recorder = None
    try:
        trainer.start()
        recorder = recorder_for({"progress": {"url": trainer.url, "field": "job.step",
                                              "interval_s": interval_s}}, session.clock)
        session.recorder = recorder.start()
        yield trainer, recorder
    finally:
        if recorder is not None:
            recorder.stop()
        trainer.close()
        deactivate()


def test_progress_from_the_jobs_endpoint_bounds_the_true_loss() -> None:
    with trainer_and_recorder(interval_s=0.2) as (trainer, recorder):
        wait_until(lambda: [r for r in recorder.readings("progress")
                            if r.value is not None and r.value >= 40], 20, "step 40 sampled")
        session = new_session()
        session.recorder = recorder
        record_fault(session, kind="process.kill")
        trainer.kill()
        time.sleep(2.0)  # gone for longer than gap_s: the recorder sees it absent
        trainer.start()
        result = checkpoint_loss(progress_http={"url": trainer.url, "field": "job.step"},
                                 durable=None, resumed=None, slo_steps=1000, timeout_s=20,
                                 interval_s=0.3)
        truth = trainer.truth()
        at_fault = max(n for word, n in truth[:[w for w, _ in truth].index("resumed", 1)]
                       if word == "step")
        resumed = truth[[w for w, _ in truth].index("resumed", 1)][1]
        assert result["progress_at_fault"] <= at_fault <= result["progress_at_fault_max"]
        assert result["resumed_from_min"] <= resumed <= result["resumed_from"]
        assert result["lost_steps_min"] <= at_fault - resumed <= result["lost_steps_max"]
        assert result["exact"] is False and result["resolution_steps"] > 0
        assert result["sources"]["progress"] == ("HTTP endpoint every 0.2 s (the run's "
                                                 "recorder)")
        assert result["verdict"] == "met" and only_result(session).passed is True
        assert recorder.to_json()["channels"][0]["values"][-1][1] >= resumed
        print(f"truth: at fault {at_fault}, resumed {resumed}, lost {at_fault - resumed}; "
              f"measured {result['lost_steps_min']:g} to {result['lost_steps_max']:g}")


def test_a_kill_as_the_methods_first_action_still_gives_a_finite_bound() -> None:
    """The kill comes right after the recorder's first reading, so nothing shows the
    job's pace before the fault: the unseen steps are bounded at twice the restarted
    job's pace, and the bound holds the truth."""
    with trainer_and_recorder(interval_s=0.2) as (trainer, recorder):
        wait_until(lambda: [r for r in recorder.readings("progress") if r.value is not None],
                   20, "a first reading")
        session = new_session()
        session.recorder = recorder
        record_fault(session, kind="process.kill")
        trainer.kill()
        time.sleep(2.0)
        trainer.start()
        result = checkpoint_loss(progress_http={"url": trainer.url, "field": "job.step"},
                                 durable=None, resumed=None, slo_steps=1000, timeout_s=20,
                                 interval_s=0.3)
        truth = trainer.truth()
        restart = [w for w, _ in truth].index("resumed", 1)
        at_fault = max((n for word, n in truth[:restart] if word == "step"), default=0)
        resumed = truth[restart][1]
        assert result["progress_at_fault_max"] != float("inf")
        assert result["progress_at_fault"] <= at_fault <= result["progress_at_fault_max"]
        assert result["lost_steps_min"] <= at_fault - resumed <= result["lost_steps_max"]
        assert only_result(session).passed is True
        print(f"truth: at fault {at_fault}, lost {at_fault - resumed}; measured "
              f"{result['lost_steps_min']:g} to {result['lost_steps_max']:g}")


def test_progress_http_needs_the_run_recorder_to_sample_it() -> None:
    session = new_session()
    record_fault(session, kind="process.kill")
    try:
        with pytest.raises(ActivityFailed, match=r"^checkpoint_loss: progress_http: the run's "
                                                 r"SLI recorder does not sample "
                                                 r"http://127.0.0.1:9/progress \(step\); "):
            checkpoint_loss(progress_http={"url": "http://127.0.0.1:9/progress",
                                           "field": "step"}, durable=None, resumed=None)
        with pytest.raises(ActivityFailed, match=r'^checkpoint_loss: progress_http must be '
                                                 r'\{"url": URL, "field": JSON_PATH\}'):
            checkpoint_loss(progress_http={"url": "http://127.0.0.1:9/progress"})
    finally:
        deactivate()


def test_json_field_reads_nested_keys_and_indices() -> None:
    document = {"job": {"ranks": [{"step": 7}, {"step": 9.5}]}, "ok": True}
    assert json_field(document, "job.ranks.1.step") == 9.5
    assert json_field(document, "job.ranks.-2.step") == 7
    with pytest.raises(ValueError, match=r"no 'rank' at 'job.rank.0'"):
        json_field(document, "job.rank.0")
    with pytest.raises(ValueError, match="is bool, not a number"):
        json_field(document, "ok")
