"""The training frameworks as they really run: the Hugging Face ``Trainer`` (a tiny
GPT-2 from a config in code) and Lightning (a 2-layer MLP), each on the CPU with random
data, under a real supervisor process that restarts the trainer when it dies
(tests/workloads/supervisor.py), killed with the host backend's SIGKILL (picked by its
environment, which the supervisor does not share). The job runs gameday's integration
callback and nothing else of gameday; the RPO from the integration's log and the
checkpoint store is compared with each framework's own ground truth: the step it had
done (read off its state by a callback of the test's own), and the checkpoint it then
resumed from (HF's ``trainer_state.json``, Lightning's ``last.ckpt`` contents, as they
were on the store at the kill, before the next save pruned them)."""

import json
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from chaoslib.exceptions import ActivityFailed

from gameday.contract.backend import FaultRequest
from gameday.engine.session import deactivate
from gameday.node.host.process import HostSignalFault
from tests.verifiers.verifier_helpers import (
    PrometheusUnderTest,
    free_port,
    new_session,
    only_result,
    record_fault,
)
from verifiers.checkpoints import scan_store
from verifiers.rpo import checkpoint_loss

torch = pytest.importorskip("torch", reason="the workloads extra installs torch==2.13.0")

HERE = Path(__file__).parent
REPO = HERE.parent.parent


class SupervisedJob:
    """A framework's job script under the supervisor, with its own id in the env."""

    def __init__(self, script: str, root: Path, **extra_env: str) -> None:
        self.root, self.id = root, f"gameday-test-{uuid.uuid4().hex[:10]}"
        self.log = root / "progress.log"
        self.store = root / "checkpoints"
        env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "GAMEDAY_TEST_JOB": self.id,
               "GAMEDAY_PROGRESS_LOG": str(self.log), "HOME": str(root),
               "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1",
               "OMP_NUM_THREADS": "1", **extra_env}
        self.process = subprocess.Popen(
            [sys.executable, str(HERE / "supervisor.py"), "--max-restarts", "3", "--",
             sys.executable, str(HERE / script), "--dir", str(root)],
            env=env, stdout=(root / "supervisor.out").open("w"), stderr=subprocess.STDOUT)

    def truth(self) -> list[dict[str, Any]]:
        path = self.root / "truth.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines()
                if line.endswith("}")]

    def output(self) -> str:
        return (self.root / "supervisor.out").read_text()[-3000:]

    def wait(self, what: str, done: Callable[[list[dict[str, Any]]], bool],
             timeout_s: float = 120.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if done(self.truth()):
                return
            assert self.process.poll() is None, self.output()
            time.sleep(0.1)
        raise AssertionError(f"job never reached {what}: {self.output()}")

    def kill_trainer(self) -> int:
        """SIGKILL the trainer (not the supervisor), picked by its environment."""
        details = HostSignalFault("process.kill").apply("f-1", FaultRequest("process.kill", {
            "env": {"GAMEDAY_TEST_JOB": self.id, "GAMEDAY_TEST_ROLE": "trainer"}}))
        return int(details["processes"][0]["pid"])

    def close(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def steps(attempt: int, at_least: int) -> Callable[[list[dict[str, Any]]], bool]:
    return lambda truth: sum(e["attempt"] == attempt and e["event"] == "step"
                             for e in truth) >= at_least


def hf_checkpoint_step(store: Path) -> int:
    """The step of the newest complete HF checkpoint, from its own trainer_state.json."""
    complete = [p for p in store.glob("checkpoint-*") if (p / "trainer_state.json").exists()]
    newest = max(complete, key=lambda p: int(p.name.split("-")[1]))
    return int(json.loads((newest / "trainer_state.json").read_text())["global_step"])


def lightning_checkpoint_step(store: Path) -> int:
    """The step inside Lightning's last.ckpt, the file ``ckpt_path="last"`` loads."""
    return int(torch.load(store / "last.ckpt", weights_only=False)["global_step"])


def measure(job: SupervisedJob, read_resume_truth: Callable[[Path], int]) -> None:
    job.wait("25 steps", steps(0, 25))
    session = new_session()
    job.kill_trainer()
    record_fault(session, kind="process.kill")
    time.sleep(0.5)  # (the supervisor backs off 0.2 s: the store is as the kill left it)
    will_resume = read_resume_truth(job.store)
    result = checkpoint_loss(progress=None, durable=None, resumed=None,
                             job_log=str(job.log), checkpoints=str(job.store),
                             slo_steps=1000, fault_kind="process.kill", timeout_s=120)
    job.wait("3 steps after the restart", steps(1, 3))
    truth = job.truth()
    done = max(e["step"] for e in truth if e["attempt"] == 0 and e["event"] == "step")
    resumed = next(e["step"] for e in truth if e["attempt"] == 1 and e["event"] == "begin")
    assert resumed == will_resume  # the framework loaded the checkpoint the store held
    assert result["exact"] is True and result["verdict"] == "met"
    assert result["lost_steps"] == done - resumed, (result, done, resumed)
    assert result["resumed_from"] == resumed == result["durable_at_fault"]
    assert only_result(session).reason.startswith(f"rpo {done - resumed:g} steps <= ")
    seen = [c["step"] for c in only_result(session).measurement["checkpoints_seen"]
            ["checkpoints"]]
    assert resumed in seen
    print(f"truth: done {done}, resumed {resumed}, lost {done - resumed}; measured "
          f"{result['lost_steps']:g} ({result['restart_signal']})")


@pytest.fixture
def deactivated() -> Iterator[None]:
    yield
    deactivate()


def test_hf_trainer_rpo_is_the_frameworks_own(tmp_path: Path, deactivated: None) -> None:
    pytest.importorskip("transformers", reason="the hf extra installs transformers")
    pytest.importorskip("accelerate", reason="the hf extra installs accelerate")
    job = SupervisedJob("hf_job.py", tmp_path)
    try:
        measure(job, hf_checkpoint_step)
        assert all(c.form == "hf" for c in scan_store(job.store))
    finally:
        job.close()


def test_lightning_rpo_is_the_frameworks_own(tmp_path: Path, deactivated: None) -> None:
    pytest.importorskip("lightning", reason="the lightning extra installs lightning")
    job = SupervisedJob("lightning_job.py", tmp_path)
    try:
        measure(job, lightning_checkpoint_step)
        # The job is still saving: between writing step=N (pruning the one before) and
        # rewriting last.ckpt, the older last.ckpt has no step file of its own to read.
        deadline = time.monotonic() + 30
        while {c.form for c in scan_store(job.store)} != {"lightning", "lightning-last"}:
            assert time.monotonic() < deadline, scan_store(job.store)
            time.sleep(0.05)
    finally:
        job.close()


def test_hf_crash_looping_on_a_torn_checkpoint_is_reported_as_such(
        tmp_path: Path, deactivated: None) -> None:
    """The trainer is killed while a save is torn: ``checkpoint-N`` without its
    ``trainer_state.json`` (the test leaves the torn directory a kill during a save
    leaves; timing a real kill inside a 10 ms save is not reliable). HF's
    ``resume_from_checkpoint=True`` picks the highest ``checkpoint-N`` and crashes
    loading it, at every restart the supervisor makes: gameday says the job restarted
    that many times and never resumed, and that the torn checkpoint never counted."""
    pytest.importorskip("transformers", reason="the hf extra installs transformers")
    pytest.importorskip("accelerate", reason="the hf extra installs accelerate")
    job = SupervisedJob("hf_job.py", tmp_path)
    try:
        job.wait("25 steps", steps(0, 25))
        session = new_session()
        job.kill_trainer()
        record_fault(session, kind="process.kill")
        torn = job.store / "checkpoint-100000"
        torn.mkdir()
        (torn / "config.json").write_text("{}")
        durable = hf_checkpoint_step(job.store)
        assert job.process.wait(timeout=180) == 1  # the supervisor gave up: 3 restarts
        restarts = (tmp_path / "supervisor.out").read_text().count("started attempt") - 1
        with pytest.raises(ActivityFailed, match=rf"^job restarted {restarts} times within "
                                                 rf"timeout 1 s after the fault and never "
                                                 rf"resumed \(progress last \d+"):
            checkpoint_loss(progress=None, durable=None, resumed=None,
                            job_log=str(job.log), checkpoints=str(job.store), timeout_s=1,
                            fault_kind="process.kill")
        measurement = only_result(session).measurement
        assert measurement["restarts_seen"] == restarts == 3
        assert 100000 not in [c["step"] for c in measurement["checkpoints_seen"]
                              ["checkpoints"]]
        assert max(c["step"] for c in measurement["checkpoints_seen"]["checkpoints"]) \
            == durable
    finally:
        job.close()


def test_lightning_rpo_from_the_integrations_gauges_in_prometheus(
        tmp_path: Path, deactivated: None) -> None:
    """The same kill read from Prometheus alone (1 s scrapes of the integration's
    gauges, under the names checkpoint_loss reads by default; the restart seen from
    ``process_start_time_seconds``): a bound that holds the framework's own truth, the
    resumed step exact from its gauge."""
    pytest.importorskip("lightning", reason="the lightning extra installs lightning")
    port = free_port()
    prometheus = PrometheusUnderTest(workloads=[f"127.0.0.1:{port}"])
    job = SupervisedJob("lightning_job.py", tmp_path,
                        GAMEDAY_PROGRESS_METRICS_PORT=str(port))
    try:
        deadline = time.monotonic() + 90
        while not prometheus_saw(prometheus, "changes(gameday_trainer_step[1m]) >= 3"):
            assert time.monotonic() < deadline and job.process.poll() is None, job.output()
            time.sleep(0.25)
        session = new_session()
        job.kill_trainer()
        record_fault(session, kind="process.kill")
        result = checkpoint_loss(restart='max(process_start_time_seconds{job="workload"})',
                                 prometheus_url=prometheus.url, slo_steps=1000,
                                 fault_kind="process.kill", timeout_s=90)
        job.wait("3 steps after the restart", steps(1, 3))
        truth = job.truth()
        done = max(e["step"] for e in truth if e["attempt"] == 0 and e["event"] == "step")
        resumed = next(e["step"] for e in truth if e["attempt"] == 1 and e["event"] == "begin")
        assert result["resumed_from"] == resumed == result["resumed_from_min"]
        assert result["lost_steps_min"] <= done - resumed <= result["lost_steps_max"]
        assert result["exact"] is False and result["verdict"] == "met"
        print(f"truth: lost {done - resumed}; measured {result['lost_steps_min']:g} to "
              f"{result['lost_steps_max']:g}")
    finally:
        job.close()
        prometheus.close()


def prometheus_saw(prometheus: PrometheusUnderTest, query: str) -> bool:
    try:
        return bool(prometheus.query(query))
    except OSError:  # Prometheus still starting
        return False
