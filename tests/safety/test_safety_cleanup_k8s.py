"""`gameday cleanup` for Kubernetes-level faults left by a dead run, and for ledger
entries whose agent no longer exists (``--forget-unreachable``).

Stand-ins: the Kubernetes API is gameday/testing/kube.py, a STAND-IN served over real
HTTP and driven by the REAL ``kubernetes`` client (no cluster exists on this machine);
the agents' GPUs are virtual (no NVML). Real: the orchestrator process that applies a
cordon and a taint with the real ``faults.k8s`` code and is killed with SIGKILL, the
``gameday cleanup`` CLI processes, the ledger file, the agents over real HTTP, and a
dead agent URL (a port nothing listens on: connection refused).
"""

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from gameday.clock import FakeClock
from gameday.evidence.ledger import FaultEntry, append_event, open_intents, read_ledger
from gameday.kube.config import KubeSettings, api_client
from gameday.kube.marks import MARKS_ANNOTATION
from gameday.kube.nodes import NodeEditor
from gameday.safety.cleanup import cleanup
from gameday.safety.targetconfig import TargetConfig
from gameday.testing.kube import KubeStandin, running_standin
from tests.safety.safety_helpers import REPO, TOKEN, env_for, gameday, virtual_agents

NAMESPACE = "gameday-system"

#: An orchestrator's start: a session on the API at argv[1] (token argv[2]), ledger
#: argv[3], lease argv[4].
OPEN_SESSION = """
import sys, time
from pathlib import Path
import faults.k8s as k8s
from gameday.engine import session as sessions
from gameday.experiment.extension import Extension
from gameday.targets.kubernetes.target import kubernetes_target
url, token, ledger, lease = sys.argv[1:5]
target = kubernetes_target({"k8s_api_url": url, "k8s_api_token": token})
sessions.activate(sessions.Session(target=target, ledger_path=Path(ledger),
                                   extension=Extension(lease_s=float(lease))))
"""
ORCHESTRATOR = OPEN_SESSION + """
k8s.node_cordon({"name": "node-0"})
k8s.node_taint({"name": "node-0"}, key="gameday.dev/gdcln")
k8s.node_cordon({"name": "node-1"})
print("applied", flush=True)
time.sleep(120)
"""


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[KubeStandin]:
    """The API stand-in with two GPU nodes, each running a real (in-process) agent."""
    with running_standin() as api, virtual_agents(tmp_path, nodes=2, gpus=1) as servers:
        api.add_secret(NAMESPACE, "gameday-agent-token", {"token": TOKEN})
        for name, server in servers.items():
            api.add_node(name, {"nvidia.com/gpu.present": "true"})
            api.add_pod(NAMESPACE, f"gameday-agent-{name}", name,
                        labels={"app.kubernetes.io/name": "gameday-agent"},
                        port=int(server.url.rsplit(":", 1)[1]), owner_kind="DaemonSet")
        yield api


def _env(tmp: Path, **extra: str) -> dict[str, str]:
    """The CLI's environment, with no Kubernetes configuration but what ``extra`` adds."""
    env = {k: v for k, v in env_for(tmp).items()
           if not k.startswith(("KUBE", "GAMEDAY_K8S_", "GAMEDAY_AGENT_"))}
    env["HOME"] = str(tmp / "nohome")  # no ~/.kube/config
    env.update(extra)
    return env


def _node(api: KubeStandin, name: str) -> dict[str, Any]:
    with api.lock:
        copied: dict[str, Any] = json.loads(json.dumps(api.nodes[name]))
        return copied


def test_cleanup_reverts_kubernetes_faults_of_a_killed_run(cluster: KubeStandin,
                                                           tmp_path: Path) -> None:
    api = cluster
    ledger = tmp_path / "home" / "ledger.jsonl"
    orchestrator = subprocess.Popen(
        [sys.executable, "-c", ORCHESTRATOR, api.url, api.token, str(ledger), "30"],
        env={**os.environ, "PYTHONPATH": str(REPO)}, cwd=REPO, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    try:
        assert orchestrator.stdout is not None
        lines = iter(orchestrator.stdout.readline, "")  # the log's lines come first
        assert any(line.strip() == "applied" for line in lines), (
            orchestrator.stderr.read() if orchestrator.stderr else "")
    finally:
        orchestrator.send_signal(signal.SIGKILL)
        assert orchestrator.wait(10) == -signal.SIGKILL  # gone: nothing renews the marks
        for stream in (orchestrator.stdout, orchestrator.stderr):
            if stream is not None:
                stream.close()
    assert _node(api, "node-0")["spec"] == {
        "unschedulable": True,
        "taints": [{"key": "gameday.dev/gdcln", "value": "true", "effect": "NoSchedule"}]}
    held = {f["kind"] + "@" + f["node"]: f for f in read_ledger(ledger)}
    assert set(held) == {"k8s.node_cordon@node-0", "k8s.node_taint@node-0",
                         "k8s.node_cordon@node-1"}
    # node-1's agent reconciler got there first: the undo it runs, through the API
    editor = NodeEditor(client.CoreV1Api(api_client(KubeSettings(api_url=api.url,
                                                                 api_token=api.token))))
    assert [m.id for m in editor.undo("node-1", lambda mark: True)] == \
        [held["k8s.node_cordon@node-1"]["id"]]
    assert MARKS_ANNOTATION not in _node(api, "node-1")["metadata"]["annotations"]

    env = _env(tmp_path, GAMEDAY_K8S_API_URL=api.url, GAMEDAY_K8S_API_TOKEN=api.token)
    first = gameday(["cleanup"], env, timeout=60)
    assert first.returncode == 0, first.stdout + first.stderr
    lines = first.stdout.strip().splitlines()
    run = held["k8s.node_cordon@node-0"]["run"]
    cordon, taint = held["k8s.node_cordon@node-0"]["id"], held["k8s.node_taint@node-0"]["id"]
    other = held["k8s.node_cordon@node-1"]["id"]
    source = f"(ledger, run {run}, via kubernetes)"
    assert sorted(lines[:-1]) == sorted([
        f"reverted (uncordon): k8s.node_cordon {cordon} on node-0 [node=node-0] {source}",
        f"reverted (untaint): k8s.node_taint {taint} on node-0 [node=node-0] {source}",
        f"already reverted (no mark of it left on the node): k8s.node_cordon {other} on "
        f"node-1 [node=node-1] {source}"])
    assert lines[-1] == "cleanup: 3 reverted, 0 skipped, 0 failed"
    for name in ("node-0", "node-1"):
        node = _node(api, name)
        assert node["spec"] == {} and node["metadata"]["annotations"] == {}, node
    assert all(f["reverted_at"] is not None for f in read_ledger(ledger))

    second = gameday(["cleanup"], env, timeout=60)
    assert second.returncode == 0 and second.stdout.strip() == "cleanup: nothing to revert"


CORDON_ONLY = OPEN_SESSION + """
k8s.node_cordon({"name": "node-0"})
"""


def test_a_mark_whose_answer_was_never_read_is_resolved_by_cleanup(cluster: KubeStandin,
                                                                   tmp_path: Path) -> None:
    """The API applies the cordon (and its mark) but answers late; the orchestrator is
    SIGKILLed meanwhile: the ledger holds only the intent, whose id is the mark's, and
    cleanup undoes the mark by that id. An intent whose mark never reached the node is
    recorded as not held."""
    api = cluster
    ledger = tmp_path / "home" / "ledger.jsonl"
    api.hold_patches = threading.Event()
    orchestrator = subprocess.Popen(
        [sys.executable, "-c", CORDON_ONLY, api.url, api.token, str(ledger), "300"],
        env={**os.environ, "PYTHONPATH": str(REPO)}, cwd=REPO, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL)
    try:
        assert api.patched.wait(60), "the cordon never reached the API"
    finally:
        orchestrator.send_signal(signal.SIGKILL)
        assert orchestrator.wait(10) == -signal.SIGKILL
        api.hold_patches.set()
    assert _node(api, "node-0")["spec"] == {"unschedulable": True}
    assert read_ledger(ledger) == []  # no outcome: only the intent
    [intent] = open_intents(ledger)
    mark = intent["request_id"]
    assert intent["via"] == "kubernetes" and mark in _node(api, "node-0")["metadata"][
        "annotations"][MARKS_ANNOTATION]
    append_event(ledger, "intent", intent["run"], {
        "kind": "k8s.node_cordon", "node": "node-1", "agent_url": "", "params": {},
        "lease_s": 300, "action": "node_cordon", "via": "kubernetes",
        "requests": [{"request_id": "k8s-never", "target": {"node": "node-1"},
                      "inverse": {"op": "uncordon"}}]})
    env = _env(tmp_path, GAMEDAY_K8S_API_URL=api.url, GAMEDAY_K8S_API_TOKEN=api.token)
    first = gameday(["cleanup"], env, timeout=60)
    assert first.returncode == 0, first.stdout + first.stderr
    source = f"(ledger intent, run {intent['run']}, via kubernetes)"
    assert first.stdout.strip().splitlines() == [
        f"reverted (mark {mark}): k8s.node_cordon request {mark} on node-0 [node=node-0] "
        f"{source}",
        "not held (no mark k8s-never on the node): k8s.node_cordon request k8s-never on "
        f"node-1 [node=node-1] {source}",
        "cleanup: 1 reverted, 1 never applied, 0 skipped, 0 failed"]
    node = _node(api, "node-0")
    assert node["spec"] == {} and node["metadata"]["annotations"] == {}, node
    assert open_intents(ledger) == []
    second = gameday(["cleanup"], env, timeout=60)
    assert second.returncode == 0 and second.stdout.strip() == "cleanup: nothing to revert"


def _k8s_entry(ledger: Path, fault_id: str, node: str, expires_at: float) -> None:
    entry = FaultEntry(id=fault_id, kind="k8s.node_cordon", node=node, agent_url="",
                       target={"node": node}, params={"count": 1}, injected_at="kubernetes",
                       applied_at=expires_at - 30, expires_at=expires_at, lease_s=30,
                       action="node_cordon", details={"inverse": {"op": "uncordon",
                                                                  "node": node}},
                       via="kubernetes")
    append_event(ledger, "applied", "run-gone", entry.to_json())


def test_without_kubernetes_configuration_the_reconciler_is_named(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No API to reach: the deadline is printed; within one lease it is the reconciler's
    job (not a failure), beyond it cleanup fails."""
    monkeypatch.setenv("HOME", str(tmp_path / "nohome"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    clock = FakeClock(start=1_800_000_000.0)
    ledger = tmp_path / "home" / "ledger.jsonl"
    _k8s_entry(ledger, "k8s-past", "gpu-a", clock.now() - 12)
    _k8s_entry(ledger, "k8s-soon", "gpu-b", clock.now() + 20)
    report = cleanup(ledger, lab_dir=None, config=TargetConfig(), environ={}, clock=clock)
    assert report.exit_code == 0 and report.failed == [] and len(report.deferred) == 2
    assert report.deferred[0].startswith(
        "left to the reconciler: k8s.node_cordon k8s-past on gpu-a [node=gpu-a] (ledger, run "
        "run-gone, via kubernetes): no Kubernetes configuration (target kubernetes: cannot "
        "configure the API client from the in-cluster service account")
    assert report.deferred[0].endswith(
        "the node agent's reconciler undoes it at its deadline 2027-01-15T07:59:48Z (12 s ago)")
    assert report.deferred[1].endswith("2027-01-15T08:00:20Z (in 20 s)")

    _k8s_entry(ledger, "k8s-far", "gpu-c", clock.now() + 3600)
    late = cleanup(ledger, lab_dir=None, config=TargetConfig(), environ={}, clock=clock)
    assert late.exit_code == 1 and len(late.deferred) == 2
    (failed,) = late.failed
    assert failed.startswith("FAILED k8s.node_cordon k8s-far on gpu-c")
    assert "deadline 2027-01-15T09:00:00Z (in 3600 s) is beyond one lease from now" in failed
    assert failed.endswith("apply the inverse {'op': 'uncordon', 'node': 'gpu-c'}")
    assert all(f["reverted_at"] is None for f in read_ledger(ledger))  # nothing claimed


def _dead_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def _agent_entry(ledger: Path, fault_id: str, url: str) -> None:
    now = time.time()
    entry = FaultEntry(id=fault_id, kind="gpu.ecc", node="node-0", agent_url=url,
                       target={"gpu": 1}, params={"kind": "single_bit"}, injected_at="virtual",
                       applied_at=now - 60, expires_at=now - 30, lease_s=30, action="ecc")
    append_event(ledger, "applied", "run-old-lab", entry.to_json())


def test_forget_unreachable_agents(tmp_path: Path) -> None:
    """A lab restarted on new ports: its old agents' URLs are dead. Cleanup fails and
    suggests the flag; with it the entries are forgotten (recorded), then skipped."""
    ledger = tmp_path / "home" / "ledger.jsonl"
    dead, unknown = _dead_url(), _dead_url()
    _agent_entry(ledger, "f-dead", dead)
    _agent_entry(ledger, "f-unknown", unknown)
    env = _env(tmp_path, GAMEDAY_AGENT_URL=dead, GAMEDAY_AGENT_TOKEN=TOKEN)

    first = gameday(["cleanup"], env, timeout=60)
    assert first.returncode == 1
    lines = first.stdout.strip().splitlines()
    assert lines[0].startswith("FAILED gpu.ecc f-dead on node-0 [gpu=1] (ledger, run "
                               f"run-old-lab): agent {dead}: ")
    assert "connection refused" in lines[0]
    assert lines[1] == (f"FAILED gpu.ecc f-unknown on node-0 [gpu=1] (ledger, run run-old-lab):"
                        f" no token known for agent {unknown} (add it to the target "
                        "configuration); if it no longer exists, `gameday cleanup "
                        "--forget-unreachable` forgets this fault")
    assert all(line.endswith("--forget-unreachable` forgets this fault") for line in lines[:2])
    assert lines[-1] == "cleanup: 0 reverted, 0 skipped, 2 failed"

    forgot = gameday(["cleanup", "--forget-unreachable"], env, timeout=60)
    assert forgot.returncode == 0, forgot.stdout
    lines = forgot.stdout.strip().splitlines()
    assert lines[0].startswith("forgotten: gpu.ecc f-dead on node-0 [gpu=1] (ledger, run "
                               "run-old-lab): agent ")
    assert lines[1] == ("forgotten: gpu.ecc f-unknown on node-0 [gpu=1] (ledger, run "
                        f"run-old-lab): no token known for agent {unknown} (add it to the "
                        "target configuration)")
    assert lines[-1] == "cleanup: 0 reverted, 0 skipped, 0 failed, 2 forgotten"
    events = [json.loads(raw) for raw in ledger.read_text().splitlines()]
    forgotten = [e for e in events if e["event"] == "forgotten"]
    assert [e["id"] for e in forgotten] == ["f-dead", "f-unknown"]
    assert "connection refused" in forgotten[0]["forgotten_reason"]
    assert all(e["forgotten_at"] > 0 for e in forgotten)

    again = gameday(["cleanup", "--forget-unreachable"], env, timeout=60)
    assert again.returncode == 0 and again.stdout.strip() == "cleanup: nothing to revert"


def test_a_node_gone_from_the_cluster_can_be_forgotten(tmp_path: Path) -> None:
    """The API (stand-in) answers 404 for the node: a failure that suggests the flag;
    with it, the entry is forgotten."""
    ledger = tmp_path / "home" / "ledger.jsonl"
    _k8s_entry(ledger, "k8s-gone", "gpu-gone", time.time() + 10)
    with running_standin() as api:
        environ = {"GAMEDAY_K8S_API_URL": api.url, "GAMEDAY_K8S_API_TOKEN": api.token}
        report = cleanup(ledger, lab_dir=None, config=TargetConfig(), environ=environ)
        assert report.exit_code == 1
        assert report.failed == [
            "FAILED k8s.node_cordon k8s-gone on gpu-gone [node=gpu-gone] (ledger, run "
            "run-gone, via kubernetes): node gpu-gone does not exist in the cluster "
            "(decommissioned, or another cluster is configured); if it no longer exists, "
            "`gameday cleanup --forget-unreachable` forgets this fault"]
        forgot = cleanup(ledger, lab_dir=None, config=TargetConfig(), environ=environ,
                         forget_unreachable=True)
        assert forgot.exit_code == 0 and len(forgot.forgotten) == 1
        assert forgot.forgotten[0].startswith("forgotten: k8s.node_cordon k8s-gone on gpu-gone")
        again = cleanup(ledger, lab_dir=None, config=TargetConfig(), environ=environ)
        assert (again.reverted, again.failed, again.forgotten) == ([], [], [])
