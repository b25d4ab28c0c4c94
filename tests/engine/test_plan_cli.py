"""``gameday plan`` / ``gameday run --dry-run`` as a user runs them (real CLI subprocesses):
read-only against no lab, and against a real ``gameday agent serve --backend host``
process that must see nothing applied, while a real process it would kill keeps running."""

import json
import pathlib
import subprocess
import sys
from collections.abc import Iterator

import pytest

from tests.agent.agent_marker import kill, read_url, run_agent
from tests.conftest import gameday_main, write_experiment

TOKEN = "3f9c2a7e1b8d4f60a5e2c9b7d1f4a8e3c6b0d2f5a9e7c1b4d8f2a6e0c3b5d7f9"  # 256 bits


def _experiment(path: pathlib.Path, method: list[dict[str, object]],
                target: str = "host") -> pathlib.Path:
    return write_experiment(path, {
        "version": "1.0.0", "title": "plan", "description": "a plan",
        "extensions": [{"name": "gameday", "target": target,
                        "blast_radius": {"max_nodes": 1}, "slo": {"rto_s": 5}}],
        "method": method})


def _kill(process: dict[str, object]) -> dict[str, object]:
    return {"type": "action", "name": "kill-it",
            "provider": {"type": "python", "module": "faults.process", "func": "kill",
                         "arguments": {"process": process}},
            "pauses": {"after": 3}}


@pytest.fixture
def host_agent(tmp_path: pathlib.Path, env: dict[str, str]) -> Iterator[dict[str, str]]:
    """A real host agent on loopback; ``env`` pointed at it."""
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(0o600)
    policy = tmp_path / "policy.yaml"  # the host backend refuses everything without one
    policy.write_text("kinds: [process.kill, process.pause]\n"
                      "processes: {cmdline: ['gdplan-']}\n")
    proc = run_agent(["--backend", "host", "--listen", "127.0.0.1:0", "--token-file",
                      str(token_file), "--state-dir", str(tmp_path / "state"),
                      "--node", "plan-node", "--policy", str(policy)], env,
                     tmp_path / "agent.stderr")
    try:
        url = read_url(proc)
        yield {**env, "GAMEDAY_AGENT_URL": url, "GAMEDAY_AGENT_TOKEN": TOKEN}
    finally:
        kill(proc)


def test_a_lab_plan_without_a_lab_starts_nothing_and_exits_0(tmp_path: pathlib.Path,
                                                              env: dict[str, str]) -> None:
    lab_dir = tmp_path / "lab"
    done = gameday_main(["plan", "experiments/gpu-ecc-dbe-reshard.yaml", "--lab-dir", str(lab_dir)],
                   env)
    assert done.returncode == 0, done.stderr
    assert f"no lab runs in {lab_dir}" in done.stdout
    assert "gpu.ecc (injected_at virtual, lease 30 s)" in done.stdout
    assert not lab_dir.exists()
    as_json = gameday_main(["run", "experiments/gpu-ecc-dbe-reshard.yaml", "--dry-run",
                       "--lab-dir", str(lab_dir), "--output", "json"], env)
    plan = json.loads(as_json.stdout)["plan"]
    assert as_json.returncode == 0 and plan["target_state"] == "no lab"
    assert plan["faults"][0]["kind"] == "gpu.ecc" and plan["admissible"] is True
    assert plan["blast_radius"]["limits"] == {"max_gpus": 1, "max_nodes": 1}
    assert not lab_dir.exists()


def test_a_host_plan_resolves_the_process_and_kills_nothing(
        tmp_path: pathlib.Path, host_agent: dict[str, str]) -> None:
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)",
                                "gdplan-sleeper"])
    try:
        path = _experiment(tmp_path / "kill.yaml", [_kill({"pid": sleeper.pid})])
        done = gameday_main(["run", str(path), "--dry-run"], host_agent)
        assert done.returncode == 0, done.stdout + done.stderr
        assert f"-> plan-node/pid={sleeper.pid}" in done.stdout
        assert "agent would refuse" not in done.stdout
        assert f"lock plan-node.pid-{sleeper.pid}: free" in done.stdout
        assert "estimated duration: at least 3 s" in done.stdout
        assert sleeper.poll() is None  # nothing was signalled
        home = pathlib.Path(host_agent["GAMEDAY_HOME"])
        assert not (home / "locks").exists() and not (home / "ledger.jsonl").exists()
        as_json = json.loads(gameday_main(["plan", str(path), "--output", "json"],
                                     host_agent).stdout)["plan"]
        [hit] = as_json["faults"][0]["hits"]
        assert hit["node"] == "plan-node" and hit["target"] == {"pid": sleeper.pid}
        assert hit["status"] == 200 and hit["note"] is None  # the agent's check admitted it
        assert hit["matches"]["processes"][0]["pid"] == sleeper.pid
        assert "gdplan-sleeper" in hit["matches"]["processes"][0]["command"]
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_plan_over_the_node_limit_is_refused_with_exit_2(
        tmp_path: pathlib.Path, host_agent: dict[str, str]) -> None:
    path = _experiment(tmp_path / "bad.yaml", [_kill({"pid": 1})])
    done = gameday_main(["plan", str(path)], host_agent)
    assert done.returncode == 2
    # refused as validate refuses it (the same rule, the same line), before any planning
    assert f"{path}:" in done.stderr and "process.pid: must be a pid > 1" in done.stderr
    checked = gameday_main(["validate", str(path)], host_agent)
    assert checked.returncode == 2 and "process.pid: must be a pid > 1" in checked.stdout + \
        checked.stderr


def test_a_gpu_fault_on_a_host_without_placement_names_file_and_line(
        tmp_path: pathlib.Path, host_agent: dict[str, str]) -> None:
    path = _experiment(tmp_path / "gpu.yaml", [{
        "type": "action", "name": "ecc",
        "provider": {"type": "python", "module": "faults.gpu", "func": "ecc_error",
                     "arguments": {"gpu": {"holding_shard": 0}}}}])
    done = gameday_main(["plan", str(path)], host_agent)
    assert done.returncode == 2
    line = next(n for n, text in enumerate(path.read_text().splitlines(), 1) if "gpu:" in text)
    assert (f"{path}:{line}: method[0].provider.arguments.gpu: target host has no placement "
            "source") in done.stdout
    real = gameday_main(["run", str(path)], host_agent)
    assert real.returncode == 2
    assert f"{path}:{line}: method[0].provider.arguments.gpu: target host has no placement " \
           "source" in real.stderr
