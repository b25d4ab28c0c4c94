"""checkpoint_loss from a job's own log files as the training frameworks write them:
the resume logged before the first new step (the Hugging Face ``Trainer``, torchrun
scripts), a restart line with a time and no step, local-time logs, and a crash loop that
restarts without ever resuming. The logs are files the test writes, in the frameworks'
own formats; the real frameworks run in tests/workloads/test_frameworks.py."""

from pathlib import Path

import pytest
from chaoslib.exceptions import ActivityFailed
from hypothesis import given, settings
from hypothesis import strategies as st

from gameday.engine.session import deactivate
from tests.verifiers.verifier_helpers import new_session, only_result, record_fault
from verifiers.rpo import checkpoint_loss

STEP = r"^(?P<t>\S+) step (?P<step>\d+)$"
RESUMED = r"^(?P<t>\S+) resumed from (?P<step>\d+)$"
START = r"^(?P<t>\S+) start$"


def write_log(path: Path, lines: list[tuple[float, str]]) -> None:
    path.write_text("".join(f"{t:.6f} {text}\n" for t, text in sorted(lines)))


@settings(max_examples=40, deadline=None)
@given(killed_at=st.integers(1, 120), every=st.integers(1, 25),
       resume_lead_s=st.floats(-0.5, 0.5).filter(lambda lead: abs(lead) > 1e-3),
       with_start_line=st.booleans(), step_s=st.floats(0.01, 0.2))
def test_the_resume_line_counts_before_or_after_the_first_new_step(
        tmp_path_factory: pytest.TempPathFactory, killed_at: int, every: int,
        resume_lead_s: float, with_start_line: bool, step_s: float) -> None:
    """Property: a job checkpointing every ``every`` steps, killed after step
    ``killed_at``, restarted, logging its resume ``resume_lead_s`` before (positive) or
    after (negative) its first new step, with or without a start line: the figure is
    exact and equals the steps the job redid."""
    root = tmp_path_factory.mktemp("log")
    log = root / "train.log"
    t0 = 1_000_000.0
    lines = [(t0 + step * step_s, f"step {step}") for step in range(1, killed_at + 1)]
    onset = t0 + killed_at * step_s + step_s / 2
    resumed = (killed_at // every) * every
    back_at = onset + 1.0
    if with_start_line:
        lines.append((back_at, "start"))
    first_new = back_at + 0.6
    lines.append((first_new - resume_lead_s, f"resumed from {resumed}"))
    lines += [(first_new + n * step_s, f"step {resumed + 1 + n}") for n in range(3)]
    write_log(log, lines)
    session = new_session()
    record_fault(session, kind="process.kill", applied_at=onset)
    try:
        result = checkpoint_loss(
            progress=None, durable=None, resumed=None,
            progress_log={"path": str(log), "pattern": STEP},
            resumed_log={"path": str(log), "pattern": RESUMED},
            restart_log={"path": str(log), "pattern": START} if with_start_line else None,
            slo_steps=1000, timeout_s=2, interval_s=0.1)
        assert result["exact"] is True
        assert result["lost_steps"] == killed_at - resumed
        assert result["resumed_from"] == resumed and result["progress_at_fault"] == killed_at
    finally:
        deactivate()


def test_a_crash_loop_is_reported_as_restarts_that_never_resumed(tmp_path: Path) -> None:
    """HF resuming from a torn ``checkpoint-N`` crashes at load, over and over: the job
    restarted (its start lines say so) and never resumed."""
    log = tmp_path / "train.log"
    lines = [(100.0 + step / 10, f"step {step}") for step in range(1, 31)]
    lines += [(105.0 + attempt, "start") for attempt in range(4)]
    write_log(log, lines)
    session = new_session()
    record_fault(session, kind="process.kill", applied_at=103.05)
    with pytest.raises(ActivityFailed, match=r"^job restarted 4 times within timeout 0.5 s "
                                             r"after the fault and never resumed \(progress "
                                             r"last 30, no resumed step seen\)$"):
        checkpoint_loss(progress=None, durable=None, resumed=None,
                        progress_log={"path": str(log), "pattern": STEP},
                        resumed_log={"path": str(log), "pattern": RESUMED},
                        restart_log={"path": str(log), "pattern": START},
                        timeout_s=0.5, interval_s=0.1)
    assert only_result(session).measurement["restarts_seen"] == 4
    deactivate()


def test_a_local_time_log_with_its_zone_named(tmp_path: Path) -> None:
    """Python logging's asctime in a named zone (``tz``): the onset, in Unix time, falls
    between the right lines. The log holds an earlier crash (resumed from 5 at
    12:00:09): read in the wrong zone, every line would come after the onset and that
    old resume would be taken for this fault's."""
    log = tmp_path / "train.log"
    # 12:00:00 in Tokyo (UTC+9) is 03:00:00 UTC
    lines = [f"2026-07-01 12:00:{step:02d},000 step {step}" for step in range(1, 9)]
    lines += ["2026-07-01 12:00:09,000 resumed from 5"]
    lines += [f"2026-07-01 12:00:{step + 4:02d},000 step {step}" for step in range(6, 21)]
    lines += ["2026-07-01 12:00:40,000 resumed from 10",
              "2026-07-01 12:00:40,500 step 11", "2026-07-01 12:00:41,000 step 12"]
    log.write_text("\n".join(lines) + "\n")
    stamp = r"^(?P<t>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+) "
    onset = 1782874824.5  # 2026-07-01T03:00:24.5Z: after step 20 (12:00:24 Tokyo)
    session = new_session()
    record_fault(session, kind="process.kill", applied_at=onset)
    result = checkpoint_loss(
        progress=None, durable=None, resumed=None,
        progress_log={"path": str(log), "pattern": stamp + r"step (?P<step>\d+)",
                      "tz": "Asia/Tokyo"},
        resumed_log={"path": str(log), "pattern": stamp + r"resumed from (?P<step>\d+)",
                     "tz": "Asia/Tokyo"},
        timeout_s=1, interval_s=0.1)
    assert result["progress_at_fault"] == 20 and result["lost_steps"] == 10
    assert result["restart_signal"] == "resume log line"
    assert result["restarted_at"] == 1782874840.0
    deactivate()
    session = new_session()
    record_fault(session, kind="process.kill", applied_at=onset)
    with pytest.raises(ActivityFailed, match=r"^checkpoint_loss: progress_log must be "):
        checkpoint_loss(progress=None, durable=None, resumed=None,
                        progress_log={"path": str(log), "pattern": STEP, "zone": "UTC"},
                        timeout_s=0.5)
    deactivate()
