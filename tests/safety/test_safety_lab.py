"""Safety end to end on the embedded lab (one lab for the module): real `gameday`
processes, real signals in every phase, real target locks, a real Prometheus-driven
safeguard, `gameday cleanup` after a SIGKILL, planted secrets and signed journals."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from gameday.safety.locks import live_holders
from gameday.wire.agent_client import AgentClient
from tests.conftest import read_json
from tests.safety.safety_helpers import REPO, env_for, gameday
from tests.waiting import wait_until

pytestmark = pytest.mark.lab
GAMEDAY = str(Path(sys.executable).parent / "gameday")
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
PHASES = ("steady-state", "injection", "verification", "rollback")


@pytest.fixture
def env(tmp_path: Path, lab_dir: Path) -> dict[str, str]:
    environment = env_for(tmp_path)
    environment["GAMEDAY_LAB_DIR"] = str(lab_dir)
    return environment


def agents(lab_dir: Path) -> list[AgentClient]:
    document = read_json(lab_dir / "lab.json")
    token = Path(document["token_file"]).read_text().strip()
    return [AgentClient(node["agent_url"], token) for node in document["nodes"]]


def active_faults(lab_dir: Path) -> list[dict[str, Any]]:
    return [f for client in agents(lab_dir) for f in client.faults()]


def act(activity: str, name: str, func: str, /, **arguments: Any) -> dict[str, Any]:
    module = "faults.gpu" if func in ("ecc_error", "revert") else "tests.safety.safety_acts"
    return {"type": activity, "name": name,
            "provider": {"type": "python", "module": module, "func": func,
                         "arguments": arguments}}


def experiment(path: Path, *, method: list[dict[str, Any]], probes: list[dict[str, Any]] = (),
               rollbacks: list[dict[str, Any]] = (), **extension: Any) -> Path:
    document: dict[str, Any] = {
        "title": path.stem, "description": "gdsafe",
        "extensions": [{"name": "gameday", "target": "lab", **extension}],
        "method": method,
        "rollbacks": [*rollbacks, act("action", "revert", "revert")]}
    if probes:
        document["steady-state-hypothesis"] = {"title": "holds", "probes": [
            {**p, "tolerance": True} for p in probes]}
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def ecc(node: str, index: int, **extra: Any) -> dict[str, Any]:
    return act("action", "ecc", "ecc_error", gpu={"node": node, "index": index},
               kind="single_bit", count=1, **extra)


def phase_experiment(tmp: Path, phase: str, gpu: tuple[str, int]) -> tuple[Path, Path]:
    marker = tmp / f"{phase}.marker"
    hold = act("probe", f"hold-{phase}", "hold", marker=str(marker))
    if phase == "steady-state":
        path = experiment(tmp / f"{phase}.yaml", probes=[hold], method=[ecc(*gpu)])
    elif phase == "injection":
        path = experiment(tmp / f"{phase}.yaml", method=[act(
            "action", "inject-and-hold", "inject_then_hold",
            gpu={"node": gpu[0], "index": gpu[1]}, marker=str(marker))])
    elif phase == "verification":
        path = experiment(tmp / f"{phase}.yaml", method=[ecc(*gpu), hold])
    else:
        path = experiment(tmp / f"{phase}.yaml", method=[ecc(*gpu)],
                          rollbacks=[{**hold, "type": "action"}])
    return path, marker


@pytest.mark.parametrize("signum", SIGNALS, ids=[s.name for s in SIGNALS])
def test_signals_in_every_phase_revert_everything(signum: int, tmp_path: Path,
                                                  env: dict[str, str], lab_dir: Path) -> None:
    """Four runs at once (one per phase, each on its own GPU), one real signal each."""
    gpus = [("node-0", 0), ("node-0", 1), ("node-1", 0), ("node-1", 1)]
    runs = []
    for phase, gpu in zip(PHASES, gpus, strict=True):
        directory = tmp_path / phase
        directory.mkdir()
        path, marker = phase_experiment(directory, phase, gpu)
        journal = directory / "journal.json"
        proc = subprocess.Popen([GAMEDAY, "run", str(path), "--journal-path", str(journal)],
                                env=env, cwd=REPO, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        runs.append((phase, proc, marker, journal))
    try:
        for phase, proc, marker, _ in runs:
            wait_until(lambda m=marker, p=proc: m.exists() or p.poll() is not None, 60,
                     f"{phase} phase")
            assert proc.poll() is None, f"{phase}: exited early: {proc.communicate()[0]}"
        assert len(active_faults(lab_dir)) == 3  # one in every phase but steady state
        for _, proc, _, _ in runs:
            proc.send_signal(signum)
        for phase, proc, _, journal in runs:
            output = proc.communicate(timeout=60)[0]
            assert proc.returncode == 128 + signum, (phase, output)
            document = read_json(journal)
            assert document["status"] == "interrupted", phase
            assert document["gameday"]["verdict"]["status"] == "interrupted"
            assert all(f["reverted_at"] for f in document["gameday"]["faults"]), phase
            why = document["gameday"]["verdict"]["reasons"][0]  # the revert says why, too
            name = signal.Signals(signum).name
            assert why.startswith(f"interrupted by {name} during ")
            assert {f["revert_reason"] for f in document["gameday"]["faults"]} <= {
                why, f"rollback: interrupted by {name}"}, phase  # never "requested"
            assert len(document["gameday"]["faults"]) == (phase != "steady-state"), phase
    finally:
        for _, proc, _, _ in runs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert active_faults(lab_dir) == []


def test_an_interrupted_chaos_run_says_which_signal_reverted_its_faults(
        tmp_path: Path, env: dict[str, str], lab_dir: Path) -> None:
    """Under ``chaos run`` with the gameday control, a real SIGINT in the method: the
    faults are reverted and their reason says the run was interrupted (by SIGINT where
    the toolkit's own handler did not catch it first), never ``requested`` or
    ``run-ended``."""
    path, marker = phase_experiment(tmp_path, "verification", ("node-0", 2))
    document = yaml.safe_load(path.read_text())
    document["controls"] = [{"name": "gameday", "provider": {
        "type": "python", "module": "gameday.controls"}}]
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    journal = tmp_path / "chaos.json"
    proc = subprocess.Popen([str(Path(sys.executable).parent / "chaos"), "--no-version-check",
                             "run", str(path), "--journal-path", str(journal)], env=env,
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    try:
        wait_until(lambda: marker.exists() or proc.poll() is not None, 60, "the hold")
        assert proc.poll() is None, proc.communicate()[0]
        proc.send_signal(signal.SIGINT)
        output = proc.communicate(timeout=60)[0]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    faults = read_json(journal)["gameday"]["faults"]
    assert faults and all(f["reverted_at"] for f in faults), output
    assert {f["revert_reason"] for f in faults} <= {
        "interrupted", "interrupted by SIGINT", "rollback: interrupted by SIGINT"}, output
    assert active_faults(lab_dir) == []


def test_second_run_on_a_locked_gpu_is_refused(tmp_path: Path, env: dict[str, str],
                                               lab_dir: Path) -> None:
    marker = tmp_path / "a.marker"
    first = experiment(tmp_path / "first.yaml", method=[
        ecc("node-1", 2), act("probe", "hold", "hold", marker=str(marker))])
    holder = subprocess.Popen([GAMEDAY, "run", str(first)], env=env, cwd=REPO,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_until(marker.exists, 60, "the first run to hold its fault")
        [lock] = [h for h in live_holders(Path(env["GAMEDAY_HOME"]) / "locks")
                  if h.target == "node-1.gpu-2"]
        run_id = lock.run_id
        second = experiment(tmp_path / "second.yaml", method=[ecc("node-1", 2)])
        refused = gameday(["run", str(second)], env)
        assert refused.returncode == 2, refused.stdout + refused.stderr
        assert (f"target node-1.gpu-2 is locked by run {run_id} (pid {holder.pid} on "
                in refused.stderr and " since 20" in refused.stderr), refused.stderr
        assert len(active_faults(lab_dir)) == 1
        dry = gameday(["run", str(tmp_path / "first.yaml"), "--dry-run"], env)
        assert dry.returncode == 2 and "is locked by run" in dry.stdout
        other = gameday(["run", str(experiment(tmp_path / "other.yaml",
                                               method=[ecc("node-1", 3)])), "--dry-run"], env)
        assert other.returncode == 0, other.stderr
        assert "gpu.ecc (injected_at virtual, lease 30 s)" in other.stdout
        assert "-> node-1/gpu3" in other.stdout
        assert "lock node-1.gpu-3: free" in other.stdout and "nothing injected" in other.stdout
    finally:
        holder.send_signal(signal.SIGTERM)
        holder.communicate(timeout=60)
    assert holder.returncode == 143 and active_faults(lab_dir) == []


def test_safeguard_breach_rolls_back_and_fails(tmp_path: Path, env: dict[str, str],
                                               lab_dir: Path) -> None:
    """A PromQL safeguard on the lab's real Prometheus: the fault itself trips it."""
    journal = tmp_path / "journal.json"
    path = experiment(tmp_path / "guarded.yaml", method=[
        ecc("node-0", 3), act("probe", "hold", "hold", marker=str(tmp_path / "m"))],
        safeguards=[{"name": "no-fault-visible", "promql": "sum(gameday_agent_active_faults)",
                     "max": 0, "interval_s": 0.5}])
    started = time.monotonic()
    result = gameday(["run", str(path), "--journal-path", str(journal)], env, timeout=90)
    assert result.returncode == 1, result.stdout + result.stderr
    assert time.monotonic() - started < 25  # the hold would last 30 s
    verdict = read_json(journal)["gameday"]["verdict"]
    assert any(r.startswith("safeguard no-fault-visible breached: measured 1 > max 0")
               for r in verdict["reasons"]), verdict
    assert all(f["reverted_at"] for f in read_json(journal)["gameday"]["faults"])
    assert active_faults(lab_dir) == []


def test_cleanup_after_sigkill_reverts_once(tmp_path: Path, env: dict[str, str],
                                            lab_dir: Path) -> None:
    marker = tmp_path / "m"
    path = experiment(tmp_path / "doomed.yaml", lease_s=120, method=[
        ecc("node-1", 3), act("probe", "hold", "hold", marker=str(marker))])
    proc = subprocess.Popen([GAMEDAY, "run", str(path)], env=env, cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_until(marker.exists, 60, "the fault")
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    [left] = active_faults(lab_dir)  # the 120 s lease keeps it for now
    first = gameday(["cleanup"], env)
    assert first.returncode == 0, first.stdout + first.stderr
    lines = first.stdout.strip().splitlines()
    assert lines[0].startswith(f"reverted: gpu.ecc {left['id']} on node-1 [gpu=3] (ledger, run ")
    assert lines[-1] == "cleanup: 1 reverted, 0 skipped, 0 failed"
    assert active_faults(lab_dir) == []
    again = gameday(["cleanup", "--all-agents"], env)
    assert again.returncode == 0 and again.stdout.strip() == "cleanup: nothing to revert"


def test_planted_secrets_stay_out_and_signed_journal_verifies(tmp_path: Path,
                                                              env: dict[str, str],
                                                              lab_dir: Path) -> None:
    planted = ["gdsafe-PLANTED-secret-41a7", "gdsafe-PLANTED-config-93c1",
               "gdsafe-PLANTED-var-55d2",
               Path(read_json(lab_dir / "lab.json")["token_file"]).read_text().strip()]
    path = tmp_path / "secret.yaml"
    document = yaml.safe_load(experiment(path, method=[
        ecc("node-0", 2), act("probe", "leak", "echo",
                              text="Bearer ${api_token} ${db_password}")]).read_text())
    document["secrets"] = {"prod": {"service_key": planted[0]}}
    document["configuration"] = {"api_token": planted[1]}
    path.write_text(yaml.safe_dump(document))
    key = tmp_path / "keys" / "run.key"
    assert gameday(["audit", "keygen", str(key)], env).returncode == 0
    journals = Path(env["GAMEDAY_JOURNALS"])
    result = gameday(["run", str(path), "--var", f"db_password={planted[2]}",
                      "--sign-key", str(key)], env)
    assert result.returncode == 0, result.stdout + result.stderr
    outputs = {"stdout": result.stdout, "stderr": result.stderr,
               "log": (Path(env["GAMEDAY_HOME"]) / "logs" / "gameday.log").read_text(),
               "ledger": (Path(env["GAMEDAY_HOME"]) / "ledger.jsonl").read_text()}
    for journal in journals.glob("*.json"):
        outputs[journal.name] = journal.read_text()
        [leak] = [r for r in read_json(journal)["run"] if r["activity"]["name"] == "leak"]
        assert leak["output"] == "Bearer [redacted] [redacted]"  # substituted, then scrubbed
    assert len(outputs) == 5
    for secret in planted:
        for where, text in outputs.items():
            assert secret not in text, f"a planted secret reached {where}"
    verify = gameday(["audit", "verify", str(journals), "--public-key", f"{key}.pub"], env)
    assert verify.returncode == 0 and verify.stdout.strip() == (
        "audit: OK: 1 journal, chain intact, 1 signed"), verify.stdout
    assert active_faults(lab_dir) == []
