"""Ray Serve (``ray[serve]`` 2.60 from PyPI, in its own virtual environment ``.venv-ray``
that ``make setup`` builds), a self-healing controller and a model server nobody here
wrote: a local Ray cluster with token authentication on (Ray's default), one
deployment of 3 replicas (``tests/workloads/ray_serve_app.py``) behind Ray's HTTP
proxy. Replicas are killed with the host backend's real SIGKILL, by the pid Ray's own
API gives; Ray's controller replaces them.

- ``verifiers.replacement`` reads the units from Ray's dashboard API (``GET
  /api/serve/applications/``, the ``ray_serve`` mapping, the bearer token in
  ``units.headers``), and its instants are checked against Ray's own ground truth:
  the controller's log lines ``Actor for Replica(id=...) crashed`` (detection) and
  ``Replica(id=...) started successfully`` (replacement), stamped to the millisecond
  by the controller. A second replica killed too fails as disturbed.
- ``verifiers.rto`` with every replica killed: Ray's proxy holds requests until a new
  replica serves, so the SLI's answers come late, not refused. The truth is an
  independent prober's (:class:`tests.workloads.rto_truth.DenseProber`, every 50 ms
  with at most 24 open, enough never to pause while the proxy holds its requests a
  second: a denser prober loads the recovering proxy itself on two cores; at 5 ms and
  256 open it spent itself cancelling the requests of clients that gave up, and at
  20 ms and 32 open its answers lagged gameday's for seconds after recovery, near the
  SLI's 1 s timeout), and it must lie in gameday's
  ``recovered_between``. Ray's proxy drains what it held over a few hundred ms and not
  in order, so a request one client sent can fail after another's, sent earlier, came
  back in time: the truth is the prober's first answer in time after the last failure
  either client saw (see :meth:`~tests.workloads.rto_truth.DenseProber.truth`), and the one
  from the prober's failures alone is printed beside it.

The module is marked ``alone``: ``make test`` runs it after the rest of the suite, by
itself, because Ray's dozen processes on two cores slowed the other real servers'
timing tests when run beside them. Every process of Ray's is in the app's session and
is killed at the end; Ray's token stays in the environment, not in ``~/.ray``.
"""

import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import requests
from chaoslib.exceptions import ActivityFailed

from gameday.contract.backend import FaultRequest
from gameday.engine.session import current, deactivate
from gameday.node.host.process import HostSignalFault
from tests.verifiers.verifier_helpers import free_port, new_session, record_fault
from tests.waiting import wait_until
from tests.workloads.rto_truth import DenseProber, assert_holds, errors, recorded
from verifiers.replacement import verify_replacement
from verifiers.rto import measure_recovery
from verifiers.sli import recorder_for

REPO = Path(__file__).resolve().parents[2]
RAY_PYTHON = REPO / ".venv-ray" / "bin" / "python"
APP = Path(__file__).with_name("ray_serve_app.py")
REPLICAS = 3
BODY = b'{"inputs": [1, 2, 3, 4]}'
EXPECT = '"score":2.75'
pytestmark = pytest.mark.alone
LOG_LINE = re.compile(r"^\w+ (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) controller \d+ -- (.*)$")


class RayServe:
    """The Ray Serve app, its API and its controller's log."""

    def __init__(self) -> None:
        # (short: Ray puts its unix sockets under it, and a socket path has 107 bytes)
        self.temp = Path(tempfile.mkdtemp(prefix="gdray-", dir="/tmp"))
        self.token = secrets.token_hex(32)
        self.http_port, self.dashboard_port = free_port(), free_port()
        self.score_url = f"http://127.0.0.1:{self.http_port}/score"
        self.api = f"http://127.0.0.1:{self.dashboard_port}/api/serve/applications/"
        self.headers = {"Authorization": f"Bearer {self.token}"}
        self.log_path = self.temp / "app.log"
        env = {**os.environ, "RAY_AUTH_TOKEN": self.token, "RAY_USAGE_STATS_ENABLED": "0"}
        with self.log_path.open("w") as log:
            self.process = subprocess.Popen(
                [str(RAY_PYTHON), str(APP), "--http-port", str(self.http_port),
                 "--dashboard-port", str(self.dashboard_port), "--temp-dir", str(self.temp),
                 "--replicas", str(REPLICAS)],
                stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT, env=env,
                start_new_session=True)
        deadline = time.monotonic() + 240
        while "ready\n" not in self.log_path.read_text(errors="replace"):
            assert self.process.poll() is None and time.monotonic() < deadline, (
                self.log_path.read_text(errors="replace")[-3000:])
            time.sleep(0.2)
        wait_until(self.all_running, 60, f"{REPLICAS} running replicas")

    @property
    def units(self) -> dict[str, Any]:
        return {"url": self.api, "mapping": "ray_serve", "headers": self.headers}

    def replicas(self) -> list[dict[str, Any]]:
        answer = requests.get(self.api, headers=self.headers, timeout=10)
        answer.raise_for_status()
        deployment = answer.json()["applications"]["scorer"]["deployments"]["Scorer"]
        return list(deployment["replicas"])

    def all_running(self) -> bool:
        found = self.replicas()
        return len(found) == REPLICAS and all(r["state"] == "RUNNING" for r in found)

    def kill(self, pid: int) -> None:
        killed = HostSignalFault("process.kill").apply(
            f"k-{pid}", FaultRequest("process.kill", {"pid": pid}))
        assert [p["pid"] for p in killed["processes"]] == [pid]

    def controller_log(self) -> list[tuple[float, str]]:
        """The controller's lines: (when, by its own clock, local time; the message)."""
        lines = []
        for path in sorted(self.temp.glob("session_*/logs/serve/controller_*.log")):
            for line in path.read_text(errors="replace").splitlines():
                match = LOG_LINE.match(line)
                if match:
                    when = datetime.strptime(match[1], "%Y-%m-%d %H:%M:%S,%f").timestamp()
                    lines.append((when, match[2]))
        return lines

    def logged(self, pattern: str, timeout_s: float = 10.0) -> float:
        """When the controller first logged a line matching ``pattern``."""
        deadline = time.monotonic() + timeout_s
        while True:
            found = [when for when, message in self.controller_log()
                     if re.search(pattern, message)]
            if found:
                return min(found)
            assert time.monotonic() < deadline, f"the controller never logged {pattern!r}"
            time.sleep(0.2)

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()  # the app shuts Serve and Ray down
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        for pid in session_members(self.process.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        wait_until(lambda: not session_members(self.process.pid), 30, "Ray's processes gone")
        shutil.rmtree(self.temp, ignore_errors=True)


def session_members(sid: int) -> list[int]:
    """The live processes of session ``sid`` (Ray's GCS, raylet, dashboard, workers)."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid and fields[0] != "Z":
            members.append(int(entry.name))
    return members


@pytest.fixture(scope="module")
def ray_serve() -> Iterator[RayServe]:
    if not RAY_PYTHON.exists():
        pytest.skip(f"no Ray environment at {RAY_PYTHON} (make setup builds .venv-ray)")
    serve = RayServe()
    yield serve
    serve.close()


def prober(serve: RayServe) -> DenseProber:
    return DenseProber(serve.score_url, correct_within_s=1.0, expect=EXPECT, body=BODY,
                       every_s=0.05, in_flight=24)


def within(instant: float, low: float, high: float) -> bool:
    """``instant``, logged to the millisecond (truncated), lies in ``[low, high]``."""
    return low - 0.002 <= instant and instant <= high + 0.002


def test_a_killed_replica_is_replaced_as_rays_controller_logs_it(ray_serve: RayServe) -> None:
    before = {r["replica_id"]: r["pid"] for r in ray_serve.replicas()}
    victim = sorted(before)[1]
    session = new_session(rto_s=30)
    truth_prober = prober(ray_serve)
    try:
        time.sleep(0.3)
        record_fault(session, kind="process.kill")
        ray_serve.kill(before[victim])
        result = verify_replacement(ray_serve.units, faulted=victim, timeout_s=60,
                                    interval_s=0.1)
        time.sleep(1.0)  # the new replica's first answers
    finally:
        truth_prober.close()
        deactivate()
    after = {r["replica_id"]: r["pid"] for r in ray_serve.replicas()}
    (new,) = set(after) - set(before)
    assert result["met"] is True and result["timed_by"] == "poll"
    assert result["others"] == sorted(set(before) - {victim}) and result["replaced_by"] == [new]
    assert after[new] != before[victim] and victim not in after
    onset = result["onset"]
    crashed = ray_serve.logged(rf"^Actor for Replica\(id='{victim}'.* crashed")
    started = ray_serve.logged(rf"^Replica\(id='{new}'.* started successfully")
    detected = result["detected"]
    assert within(crashed, onset + detected["after_s_min"], onset + detected["after_s"]), (
        crashed - onset, detected)
    assert within(started, onset + result["time_to_replace_s_min"], result["replaced_at"]), (
        started - onset, result)
    # the proxy routes to the new replica only once the controller counts it running
    served = min(s.done for s in truth_prober.samples
                 if s.correct and f'"pid":{after[new]}' in s.body)
    assert served >= started - 0.002
    print(f"ray replacement: detected {detected['after_s_min']:.3f}-{detected['after_s']:.3f}"
          f" s (controller log {crashed - onset:.3f}); replaced "
          f"{result['time_to_replace_s_min']:.3f}-{result['time_to_replace_s']:.3f} s "
          f"(controller log {started - onset:.3f}; first answer from the new replica "
          f"{served - onset:.3f})")


def test_a_second_replica_killed_too_fails_as_disturbed(ray_serve: RayServe) -> None:
    wait_until(ray_serve.all_running, 60, f"{REPLICAS} running replicas")
    pids = {r["replica_id"]: r["pid"] for r in ray_serve.replicas()}
    meant, other = sorted(pids)[:2]
    session = new_session(rto_s=30)
    record_fault(session, kind="process.kill")
    ray_serve.kill(pids[meant])
    ray_serve.kill(pids[other])  # not the one the experiment meant to take down
    try:
        with pytest.raises(ActivityFailed, match=rf"^another unit was disturbed while "
                                                 rf"{meant} was replaced: "):
            verify_replacement(ray_serve.units, faulted=meant, timeout_s=60, interval_s=0.1)
    finally:
        deactivate()
    wait_until(ray_serve.all_running, 60, f"{REPLICAS} running replicas again")


def test_every_replica_killed_the_proxy_holds_and_the_interval_holds_the_truth(
        ray_serve: RayServe) -> None:
    wait_until(ray_serve.all_running, 60, f"{REPLICAS} running replicas")
    pids = {r["replica_id"]: r["pid"] for r in ray_serve.replicas()}
    session = new_session(rto_s=60)
    session.recorder = recorder_for(
        {"http": ray_serve.score_url, "method": "POST", "json_body": json.loads(BODY),
         "expect_body": EXPECT, "interval_s": 0.1, "timeout_s": 1.0}, session.clock)
    session.recorder.start()
    truth_prober = prober(ray_serve)
    try:
        time.sleep(0.5)
        record_fault(session, kind="process.kill")
        for pid in pids.values():
            ray_serve.kill(pid)
        replaced = verify_replacement(ray_serve.units, faulted=sorted(pids), timeout_s=90,
                                      interval_s=0.1)
        result = measure_recovery(stable_for_s=1.0, expect_outage=True, timeout_s=90,
                                  detect={})
        time.sleep(1.2)  # the prober's answers to its last requests
        readings = current().recorder.readings()  # type: ignore[union-attr]
        alone = truth_prober.truth(result["onset"])
        since, truth = truth_prober.bounds(result["onset"], also=recorded(readings))
    finally:
        truth_prober.close()
        current().recorder.stop()  # type: ignore[union-attr]
        deactivate()
    assert len(replaced["replaced_by"]) == REPLICAS and replaced["met"] is True
    measured = errors(result, truth)
    print(f"ray every replica killed: {measured} rto {result['rto_s']:.3f} s "
          f"± {result['rto_resolution_s']}; with the prober's failures alone the truth is "
          f"{alone - truth:+.3f} s from it")
    assert_holds(result, truth, readings, truth_prober, since)
