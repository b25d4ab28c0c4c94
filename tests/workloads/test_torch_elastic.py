"""A real PyTorch elastic job (torchrun, DDP on gloo, DCP checkpoints every 10 steps; the
CPU build of torch==2.13.0): rank 1 is picked by its environment and by its parent, the
torchrun agent, killed with the host backend's SIGKILL, and gameday's RPO from the job's
log and its checkpoint store is compared with the job's own ground truth."""

import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gameday.agent.backend import FaultRequest
from gameday.engine.session import deactivate
from gameday.node.host.process import HostSignalFault, resolve_host_process
from tests.verifiers.verifier_helpers import free_port, new_session, only_result, record_fault
from verifiers.checkpoints import scan_store
from verifiers.rpo import checkpoint_loss

torch = pytest.importorskip("torch", reason="the workloads extra installs torch==2.13.0")

JOB = Path(__file__).with_name("torch_elastic_job.py")
TORCHRUN = Path(sys.executable).with_name("torchrun")
STEP = r"^(?P<t>\d+\.\d+) step (?P<step>\d+)$"
RESUMED = r"^(?P<t>\d+\.\d+) resumed from (?P<step>\d+)$"


class ElasticJob:
    """torchrun with 2 workers and one restart allowed, on a free loopback port."""

    def __init__(self, root: Path, run_id: str) -> None:
        self.root, self.run_id = root, run_id
        self.agent = subprocess.Popen(
            [str(TORCHRUN), "--nnodes", "1", "--nproc-per-node", "2", "--max-restarts", "1",
             "--monitor-interval", "0.2", "--rdzv-backend", "c10d", "--rdzv-endpoint",
             f"127.0.0.1:{free_port()}", "--rdzv-id", run_id, str(JOB), "--dir", str(root)],
            stdout=(root / "torchrun.out").open("w"), stderr=subprocess.STDOUT)

    def truth(self) -> list[dict[str, Any]]:
        path = self.root / "truth.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def wait(self, what: str, done: Callable[[list[dict[str, Any]]], bool],
             timeout_s: float = 90.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if done(self.truth()):
                return
            assert self.agent.poll() is None, (self.root / "torchrun.out").read_text()[-2000:]
            time.sleep(0.2)
        raise AssertionError(f"job never reached {what}: "
                             + (self.root / "torchrun.out").read_text()[-2000:])

    def close(self) -> None:
        self.agent.terminate()
        try:
            self.agent.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.agent.kill()
            self.agent.wait()


@pytest.fixture
def job(tmp_path: Path) -> Iterator[ElasticJob]:
    running = ElasticJob(tmp_path, f"gameday-test-{tmp_path.name[-8:]}")
    yield running
    running.close()
    deactivate()


def test_rank_kill_rpo_matches_the_jobs_ground_truth(job: ElasticJob) -> None:
    job.wait("35 steps", lambda truth: sum(e["event"] == "step" for e in truth) >= 35)
    by_env = resolve_host_process({"env": {"RANK": "1", "TORCHELASTIC_RUN_ID": job.run_id}}, {})
    by_parent = resolve_host_process({"parent": {"cmdline": f"--rdzv-id {job.run_id}"},
                                      "env": {"LOCAL_RANK": "1"}}, {})
    rank0 = resolve_host_process({"env": {"RANK": "0", "TORCHELASTIC_RUN_ID": job.run_id}}, {})
    assert len(by_env) == 1 and by_env == by_parent and rank0 and rank0 != by_env
    session = new_session()
    kill = HostSignalFault("process.kill")
    details = kill.apply("f-1", FaultRequest("process.kill", {"env": {
        "RANK": "1", "TORCHELASTIC_RUN_ID": job.run_id}}))
    record_fault(session, kind="process.kill")
    assert details["processes"][0]["pid"] == by_env[0]
    job.wait("3 steps after the restart", lambda truth: sum(
        e["attempt"] == 1 and e["event"] == "step" for e in truth) >= 3)
    truth = job.truth()
    last_step = max(e["step"] for e in truth if e["attempt"] == 0 and e["event"] == "step")
    resumed = next(e["step"] for e in truth if e["attempt"] == 1 and e["event"] == "resumed")
    log = {"path": str(job.root / "train.log"), "pattern": STEP}
    resumed_log = {"path": str(job.root / "train.log"), "pattern": RESUMED}
    store = str(job.root / "checkpoints")
    assert all(checkpoint.form == "dcp" for checkpoint in scan_store(store))

    result = checkpoint_loss(progress=None, durable=None, resumed=None, progress_log=log,
                             resumed_log=resumed_log, restart_log=resumed_log,
                             checkpoints=store, slo_steps=50, fault_kind="process.kill",
                             timeout_s=30)
    assert result["exact"] is True and result["verdict"] == "met"
    assert result["lost_steps"] == last_step - resumed  # the job's own ground truth
    assert result["resumed_from"] == resumed == result["durable_at_fault"]
    assert only_result(session).reason.startswith(f"rpo {last_step - resumed:g} steps <= ")
    deactivate()

    session = new_session()  # the resumed step from the store alone: the same figure
    record_fault(session, kind="process.kill", applied_at=result["onset"])
    again = checkpoint_loss(progress=None, durable=None, resumed=None, progress_log=log,
                            restart_log=resumed_log, checkpoints=store, slo_steps=50,
                            fault_kind="process.kill", timeout_s=30)
    assert again["lost_steps"] == result["lost_steps"] and again["exact"] is True
