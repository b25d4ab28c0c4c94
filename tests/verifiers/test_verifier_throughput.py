"""``verifiers.throughput.degradation``: the rate interval holds the truth for any monotone
job read at any times (a property, with stalls, slowdowns and restarts that redo work);
and, for real, a job writing its own step log is paused by a real ``gameday agent serve
--backend host`` (SIGSTOP, then SIGCONT after ``duration_s``) in a ``gameday run``: the
stall the verifier measures is the one the job's own step timer saw."""

import itertools
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import BIN, REPO, cli_env
from tests.host_agent import host_agent
from tests.waiting import wait_until
from verifiers.throughput import Progress

TOKEN = "7c1e5a9d3b7f1c5e9a3d7b1f5c9e3a7d1b5f9c3e7a1d5b9f3c7e1a5d9b3f7c1e"
STEP_S = 0.02
JOB = r"""
import logging, sys, time
logging.basicConfig(filename=sys.argv[1], format="%(created).6f step=%(message)s",
                    level=logging.INFO)
truth = open(sys.argv[2], "a", buffering=1)
step, last = 0, time.time()
while True:
    end = last + float(sys.argv[3])
    while time.time() < end:  # the step's work, on the CPU
        pass
    step += 1
    now = time.time()
    logging.info("%d", step)
    truth.write(f"{step} {now:.6f} {now - last:.6f}\n")  # the job's own step timer
    last = now
"""


def _reported(points: list[tuple[float, float]], t: float) -> float:
    """The progress the job reports at ``t``: linear between ``points`` (a drop, a
    restart from a checkpoint, is two points a microsecond apart)."""
    for (t0, v0), (t1, v1) in itertools.pairwise(points):
        if t0 <= t <= t1:
            return v0 + (v1 - v0) * (t - t0) / (t1 - t0) if t1 > t0 else v1
    return points[-1][1]


def _new_work(points: list[tuple[float, float]], t: float) -> float:
    """The work done by ``t`` that is not redone: the most the job had reported."""
    return max([_reported(points, t)] + [v for at, v in points if at <= t])


segments = st.lists(st.tuples(st.floats(0.05, 5), st.sampled_from([0.0, 0.5, 3.0, 40.0]),
                              st.booleans()), min_size=2, max_size=12)


@settings(max_examples=300, deadline=None)
@given(segments, st.lists(st.floats(0, 1), min_size=3, max_size=60),
       st.floats(0, 1), st.floats(0, 1))
def test_the_rate_interval_holds_the_truth(parts: list[tuple[float, float, bool]],
                                           where: list[float], a: float, b: float) -> None:
    """Random stalls, slowdowns and restarts (progress going back, redone before it is
    new work), read at random times and at every peak (as a log of every step shows it):
    the true rate of new work lies in the interval."""
    t, value = 0.0, 0.0
    points = [(0.0, 0.0)]
    peaks = []
    for length, speed, restart in parts:
        if restart and value > 2:
            peaks.append((t, value))
            t, value = t + 1e-6, value - 2  # back to a checkpoint: 2 units to redo
            points.append((t, value))
        t, value = t + length, value + speed * length
        points.append((t, value))
    span = t
    readings = [(span * w, _reported(points, span * w)) for w in where]
    progress = Progress([(0.0, 0.0), *peaks, *readings, (span, value)])
    start, end = sorted((a * span, b * span))
    rate = progress.rate(start, end)
    if rate is None:
        assert end <= start
        return
    true_rate = (_new_work(points, end) - _new_work(points, start)) / (end - start)
    assert rate.low - 1e-6 <= true_rate <= rate.high + 1e-6, (rate, true_rate)
    assert rate.low - 1e-6 <= rate.mid <= rate.high + 1e-6


@pytest.fixture
def job(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], Path, Path]]:
    log, truth = tmp_path / "job.log", tmp_path / "truth.txt"
    proc = subprocess.Popen([sys.executable, "-c", JOB, str(log), str(truth), str(STEP_S),
                             f"gdtput-{tmp_path.name}"])
    try:
        yield proc, log, truth
    finally:
        proc.kill()
        proc.wait(5)


@pytest.fixture
def agent_url(tmp_path: Path, job: tuple[subprocess.Popen[bytes], Path, Path]
              ) -> Iterator[str]:
    policy = {"kinds": ["process.pause"], "max_active": 2,
              "processes": {"cmdline": [f"gdtput-{tmp_path.name}"]}}
    with host_agent(tmp_path, TOKEN, policy, node="gdtput-host") as (url, proc):
        yield url
    assert proc.returncode == 0


def test_a_paused_job_loses_what_its_own_step_timer_saw(
        tmp_path: Path, job: tuple[subprocess.Popen[bytes], Path, Path],
        agent_url: str) -> None:
    proc, log, truth = job
    wait_until(lambda: log.exists() and len(log.read_text().splitlines()) > 150, 30,
               "the job's baseline")
    experiment = tmp_path / "pause.yaml"
    experiment.write_text(yaml.safe_dump({
        "version": "1.0.0", "title": "a paused job slows, then catches up its pace",
        "description": "process.pause for 1 s against a job's own step log",
        "extensions": [{"name": "gameday", "target": "host", "lease_s": 30}],
        "method": [
            {"type": "action", "name": "pause-the-job", "provider": {
                "type": "python", "module": "faults.process", "func": "pause",
                "arguments": {"process": {"pid": proc.pid}, "duration_s": 1.0}}},
            {"type": "probe", "name": "throughput-cost", "provider": {
                "type": "python", "module": "verifiers.throughput", "func": "degradation",
                "arguments": {"progress_log": {"path": str(log), "pattern":
                                               r"^(?P<t>[\d.]+) step=(?P<step>\d+)"},
                              "baseline_s": 2, "window_s": 0.5, "recover_within_s": 0.5,
                              "timeout_s": 10, "interval_s": 0.1}}}],
        "rollbacks": [{"type": "action", "name": "resume", "provider": {
            "type": "python", "module": "faults.process", "func": "revert"}}]}))
    env = {**cli_env(tmp_path), "GAMEDAY_AGENT_URL": agent_url, "GAMEDAY_AGENT_TOKEN": TOKEN}
    result = subprocess.run([str(BIN / "gameday"), "run", str(experiment), "--journal-path",
                             str(tmp_path / "journal.json")], cwd=REPO, env=env, text=True,
                            capture_output=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    [measured] = json.loads((tmp_path / "journal.json").read_text())["gameday"]["verifiers"]
    m = measured["measurement"]
    assert m["slowdown_pct_min"] <= 100 <= m["slowdown_pct_max"] + 1e-9  # a stop
    assert m["recovered"] and m["time_to_recover_s"] <= 0.5
    rows = [line.split() for line in truth.read_text().splitlines()]
    steps = [(float(at), float(took)) for _, at, took in rows]
    # the job's own timer: the time its steps took beyond their pace, from the fault on
    stalled = sum(took - STEP_S for at, took in steps
                  if m["onset"] < at <= m["recovered_at"] + 1 and took > 2 * STEP_S)
    assert 0.9 <= stalled <= 1.2  # the pause, as the job saw it
    slack = m["time_to_recover_resolution_s"] + 3 * STEP_S
    assert abs(m["lost_s"] - stalled) <= slack, (m, stalled)
