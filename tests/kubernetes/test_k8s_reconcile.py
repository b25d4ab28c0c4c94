"""The agent undoes gameday's Kubernetes marks when the orchestrator is gone.

Stand-ins: the Kubernetes API (gameday/testing/kube.py, real HTTP, the REAL ``kubernetes``
client in both the orchestrator and the agent), the GPUs (virtual). Real: the agent
process (``gameday agent serve --reconcile-kubernetes``), the orchestrator process
(``gameday run --target kubernetes``) and its SIGKILL, the lease renewals.
"""

import json
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from gameday.agent.reconcile import NodeMarkReconciler
from gameday.clock import FakeClock
from gameday.kube.marks import MARKS_ANNOTATION, Mark, read_marks
from gameday.kube.nodes import NodeEditor
from gameday.testing.kube import KubeStandin, running_standin
from tests.conftest import BIN, REPO, cli_env
from tests.kubernetes.k8s_cluster import (
    AGENT_TOKEN,
    NAMESPACE,
    agent_env,
    register_agent,
    start_agent_process,
    stop_process,
)
from tests.waiting import wait_until


def _node(api: KubeStandin, name: str) -> dict[str, Any]:
    with api.lock:
        return json.loads(json.dumps(api.nodes[name]))


def _experiment(path: Path, method_tail: list[dict[str, Any]]) -> Path:
    path.write_text(yaml.safe_dump({
        "version": "1.0.0", "title": "cordon a GPU node", "description": "k8s stand-in",
        "extensions": [{"name": "gameday", "target": "kubernetes", "lease_s": 2,
                        "coverage": {"fault": "k8s.node_cordon", "layer": "node"}}],
        "method": [{"type": "action", "name": "cordon-n0",
                    "provider": {"type": "python", "module": "faults.k8s",
                                 "func": "node_cordon",
                                 "arguments": {"node": {"name": "n0"}}}}, *method_tail],
        "rollbacks": [{"type": "action", "name": "revert",
                       "provider": {"type": "python", "module": "faults.k8s",
                                    "func": "revert"}}]}, sort_keys=False))
    return path


def _run_args(path: Path, api: KubeStandin) -> list[str]:
    return [str(BIN / "gameday"), "run", str(path), "--target", "kubernetes",
            "--var", f"k8s_api_url={api.url}", "--var", f"k8s_api_token={api.token}",
            "--journal-path", str(path.with_suffix(".journal.json"))]


def test_the_agent_uncordons_after_the_orchestrator_is_killed(tmp_path: Path) -> None:
    with running_standin() as api:
        api.add_secret(NAMESPACE, "gameday-agent-token", {"token": AGENT_TOKEN})
        env = agent_env(tmp_path, GAMEDAY_K8S_API_URL=api.url, GAMEDAY_K8S_API_TOKEN=api.token,
                        GAMEDAY_K8S_RECONCILE_S="0.2")
        agent, url = start_agent_process(tmp_path, "n0", "--reconcile-kubernetes", env=env)
        orchestrator = None
        try:
            register_agent(api, "n0", url)
            marker = tmp_path / "probe"
            experiment = _experiment(tmp_path / "exp.yaml", [
                {"type": "probe", "name": "hold", "provider": {
                    "type": "python", "module": "tests.fixtures.acts", "func": "sleep",
                    "arguments": {"seconds": 60, "marker": str(marker)}}}])
            orchestrator = subprocess.Popen(_run_args(experiment, api), env=cli_env(tmp_path),
                                            cwd=REPO, stdout=subprocess.DEVNULL,
                                            stderr=subprocess.DEVNULL)
            wait_until(lambda: marker.with_suffix(".started").exists(), 30, "the run to start")
            assert _node(api, "n0")["spec"]["unschedulable"] is True
            first = read_marks(_node(api, "n0")["metadata"]["annotations"])[0].revert_by
            time.sleep(2.5)  # past the 2 s lease: the live orchestrator keeps renewing
            node = _node(api, "n0")
            assert node["spec"]["unschedulable"] is True
            assert read_marks(node["metadata"]["annotations"])[0].revert_by > first
            orchestrator.send_signal(signal.SIGKILL)
            orchestrator.wait(10)
            killed_at = time.monotonic()
            wait_until(lambda: not _node(api, "n0")["spec"].get("unschedulable"), 10,
                       "the agent to uncordon n0")
            assert time.monotonic() - killed_at < 8
            assert MARKS_ANNOTATION not in _node(api, "n0")["metadata"]["annotations"]
        finally:
            if orchestrator is not None and orchestrator.poll() is None:
                orchestrator.kill()
                orchestrator.wait(10)
            assert stop_process(agent) == 0
        assert "k8s mark reverted" in (tmp_path / "agent-n0.stderr").read_text()


def test_gameday_run_cordons_and_rolls_back(tmp_path: Path) -> None:
    with running_standin() as api:
        api.add_secret(NAMESPACE, "gameday-agent-token", {"token": AGENT_TOKEN})
        agent, url = start_agent_process(tmp_path, "n0")
        try:
            register_agent(api, "n0", url)
            experiment = _experiment(tmp_path / "exp.yaml", [])
            done = subprocess.run(_run_args(experiment, api), env=cli_env(tmp_path), cwd=REPO,
                                  capture_output=True, text=True, timeout=60)
            assert done.returncode == 0, done.stdout + done.stderr
            assert "unschedulable" not in _node(api, "n0")["spec"]
            journal = json.loads(experiment.with_suffix(".journal.json").read_text())
            (fault,) = journal["gameday"]["faults"]
            assert fault["kind"] == "k8s.node_cordon" and fault["via"] == "kubernetes"
            assert fault["reverted_at"] is not None
            assert fault["inverse"] == {"op": "uncordon", "node": "n0"}
        finally:
            assert stop_process(agent) == 0


@pytest.fixture
def standin() -> Any:
    with running_standin() as api:
        api.add_node("n0")
        yield api


def test_reconcile_undoes_only_expired_marks(standin: KubeStandin) -> None:
    from kubernetes import client

    from gameday.kube.config import KubeSettings, api_client

    clock = FakeClock()
    core = client.CoreV1Api(api_client(KubeSettings(api_url=standin.url,
                                                    api_token=standin.token)))
    editor = NodeEditor(core, clock=clock)
    now = clock.now()
    editor.cordon("n0", Mark("m-cordon", "k8s.node_cordon", "r1", now + 5, {"op": "uncordon"}))
    editor.cordon("n0", Mark("m-drain", "k8s.node_drain", "r2", now + 50, {"op": "uncordon"}))
    taint = {"key": "gameday.dev/fault", "value": "true", "effect": "NoSchedule"}
    editor.taint("n0", taint, Mark("m-taint", "k8s.node_taint", "r1", now + 5,
                                   {"op": "untaint", **taint}))
    reconciler = NodeMarkReconciler(editor, "n0", clock=clock)
    assert reconciler.reconcile_once() == []
    clock.advance(10)
    assert sorted(m.id for m in reconciler.reconcile_once()) == ["m-cordon", "m-taint"]
    node = _node(standin, "n0")
    assert node["spec"]["unschedulable"] is True  # the drain's mark still holds the cordon
    assert "taints" not in node["spec"]
    assert [m.id for m in read_marks(node["metadata"]["annotations"])] == ["m-drain"]
    clock.advance(60)
    assert [m.id for m in reconciler.reconcile_once()] == ["m-drain"]
    assert "unschedulable" not in _node(standin, "n0")["spec"]


def test_a_concurrent_writer_makes_the_patch_retry(standin: KubeStandin) -> None:
    from kubernetes import client

    from gameday.kube.config import KubeSettings, api_client

    core = client.CoreV1Api(api_client(KubeSettings(api_url=standin.url,
                                                    api_token=standin.token)))
    editor = NodeEditor(core)
    calls = 0

    def change(node: dict[str, Any], marks: list[Mark]) -> dict[str, Any]:
        nonlocal calls
        calls += 1
        if calls == 1:  # someone else writes between our read and our patch
            standin.patch_node_directly("n0", {"metadata": {"labels": {"x": "y"}}})
        return {"spec": {"unschedulable": True}}

    editor.update("n0", change)
    assert calls == 2
    node = _node(standin, "n0")
    assert node["spec"]["unschedulable"] is True and node["metadata"]["labels"] == {"x": "y"}
    conflicts = [p for m, p, _ in standin.requests if m == "PATCH"]
    assert len(conflicts) == 2
