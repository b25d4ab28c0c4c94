"""Target locks, blast radius, ledger and cleanup against real agents over real HTTP.

Stand-in: the agents drive the lab's virtual GPU backend (no NVML here); locks are
real ``flock`` s, the dead holder is a real process killed with SIGKILL.
"""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from gameday.engine.fault_requests import InjectRequest
from gameday.engine.session import Session
from gameday.errors import BlastRadiusExceeded
from gameday.evidence.ledger import append_event, open_intents, read_ledger
from gameday.experiment.extension import BlastRadius, Extension
from gameday.safety.cleanup import cleanup
from gameday.safety.locks import TargetLocked, TargetLocks, live_holders, target_key
from gameday.safety.targetconfig import AgentEndpoint, TargetConfig
from gameday.targets.base import GpuRef
from tests.safety.safety_helpers import TOKEN, active, env_for, gameday, target_of, virtual_agents

ECC = {"kind": "single_bit", "count": 1, "xid": None, "corrupt_weights": False}


def test_second_holder_is_refused_with_who_and_since(tmp_path: Path) -> None:
    first, second = TargetLocks(tmp_path, "run-a"), TargetLocks(tmp_path, "run-b")
    first.acquire("node-0.gpu-1")
    first.acquire("node-0.gpu-1")  # idempotent for its holder
    with pytest.raises(TargetLocked) as refused:
        second.acquire("node-0.gpu-1")
    message = str(refused.value)
    assert f"run run-a (pid {os.getpid()} on " in message and " since 20" in message
    second.acquire("node-0.gpu-2")
    first.release_all()
    second.acquire("node-0.gpu-1")
    second.release_all()



def test_many_locks_at_once_stop_at_the_first_held_one(tmp_path: Path) -> None:
    first, second = TargetLocks(tmp_path, "run-a"), TargetLocks(tmp_path, "run-b")
    first.acquire("node-0.gpu-2")
    held_by_a = r"target node-0\.gpu-2 is locked by run run-a"
    with pytest.raises(TargetLocked, match=held_by_a) as refused:
        second.acquire_many(["node-0.gpu-0", "node-0.gpu-1", "node-0.gpu-2", "node-0.gpu-3"])
    assert refused.value.index == 2
    assert second.held() == ["node-0.gpu-0", "node-0.gpu-1"]  # taken before it: kept
    named = {(h.run_id, h.target) for h in live_holders(tmp_path)}
    assert named == {("run-a", "node-0.gpu-2"), ("run-b", "node-0.gpu-0"),
                     ("run-b", "node-0.gpu-1")}
    with pytest.raises(TargetLocked):  # gpu-3 was never taken: not named, still free
        first.acquire("node-0.gpu-0")
    first.acquire("node-0.gpu-3")
    second.acquire_many(["node-0.gpu-1", "node-0.gpu-0"])  # held already: nothing to do
    assert sum(1 for h in live_holders(tmp_path) if h.run_id == "run-b") == 2
    first.release_all()
    second.release_all()

@pytest.mark.parametrize(("node", "target", "key"), [
    ("node-0", {"gpu": 2}, "node-0.gpu-2"),
    ("node 1", {"link": "eth 0"}, "node_1.link-eth_0"),
    ("node-1", {"mount": "/data/x", "kind": "fuse"}, "node-1.kind-fuse.mount-_data_x"),
    ("", {"gpu": 1}, ".gpu-1"), ("node-0", {}, "node-0"), ("", {}, "_"),
])
def test_target_keys_name_node_and_target_in_safe_characters(
        node: str, target: dict[str, object], key: str) -> None:
    assert target_key(node, target) == key


def test_a_lock_dies_with_its_holder(tmp_path: Path) -> None:
    code = ("import sys, time; from pathlib import Path;"
            "from gameday.safety.locks import TargetLocks;"
            "TargetLocks(Path(sys.argv[1]), 'doomed').acquire('node-0.gpu-0');"
            "print('held', flush=True); time.sleep(60)")
    holder = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(TargetLocked, match=f"run doomed \\(pid {holder.pid} "):
            TargetLocks(tmp_path, "next").acquire("node-0.gpu-0")
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    after = TargetLocks(tmp_path, "next")
    after.acquire("node-0.gpu-0")  # the kernel dropped the dead run's lock
    holders = live_holders(tmp_path)
    assert [(h.run_id, h.pid, h.target) for h in holders] == [("next", os.getpid(),
                                                                "node-0.gpu-0")]
    assert not (tmp_path / "runs" / "doomed.held").exists()  # the dead run's, removed
    after.release_all()
    assert live_holders(tmp_path) == [] and list((tmp_path / "runs").iterdir()) == []


def test_two_sessions_cannot_fault_the_same_gpu(tmp_path: Path) -> None:
    with virtual_agents(tmp_path) as servers:
        ledger = tmp_path / "home" / "ledger.jsonl"
        one = Session(target=target_of(servers), ledger_path=ledger)
        two = Session(target=target_of(servers), ledger_path=ledger)
        one.inject([InjectRequest("node-0", "gpu.ecc", {"gpu": 1}, ECC)], lease_s=5)
        with pytest.raises(TargetLocked, match=f"run {one.run_id} "):
            two.inject([InjectRequest("node-0", "gpu.ecc", {"gpu": 1}, ECC)], lease_s=5)
        assert len(active(servers)) == 1  # refused before the agent was asked
        assert one.close() == [] and two.close() == []
        assert active(servers) == []


def test_blast_radius_percent_and_allowlist(tmp_path: Path) -> None:
    with virtual_agents(tmp_path) as servers:  # 2 nodes x 4 GPUs = 8
        session = Session(target=target_of(servers),
                          extension=Extension(blast_radius=BlastRadius(max_percent=25)),
                          target_config=TargetConfig(allowed_nodes=frozenset({"node-1"}),
                                                     allowed_namespaces=frozenset({"canary"}),
                                                     source="prod.yaml"))
        session.blast_radius.check_namespace("canary")
        with pytest.raises(BlastRadiusExceeded, match="namespace prod is not in the allowlist"):
            session.blast_radius.check_namespace("prod")
        two = [GpuRef("node-1", 0), GpuRef("node-1", 1)]
        session.blast_radius.check_gpus(two)  # 25 % of 8
        with pytest.raises(BlastRadiusExceeded, match=r"3 of the fleet's 8 GPUs \(37.5%\)"):
            session.blast_radius.check_gpus([*two, GpuRef("node-1", 2)])
        with pytest.raises(BlastRadiusExceeded, match="node node-0 is not in the allowlist"):
            session.blast_radius.check_gpus([GpuRef("node-0", 0)])
        with pytest.raises(BlastRadiusExceeded, match=r"allowlist of prod\.yaml"):
            session.inject([InjectRequest("node-0", "gpu.ecc", {"gpu": 0}, ECC)])
        assert active(servers) == []


def test_ledger_records_agent_lease_and_inverse(tmp_path: Path) -> None:
    with virtual_agents(tmp_path, nodes=1) as servers:
        ledger = tmp_path / "ledger.jsonl"
        session = Session(target=target_of(servers), ledger_path=ledger)
        [entry] = session.inject([InjectRequest("node-0", "gpu.ecc", {"gpu": 0}, ECC)],
                                 lease_s=7)
        [intent, applied] = [json.loads(line) for line in ledger.read_text().splitlines()]
        assert intent["event"] == "intent" and intent["agent_url"] == servers["node-0"].url
        [request] = intent["requests"]
        assert request["target"] == {"gpu": 0} and intent["lease_s"] == 7
        assert applied["event"] == "applied" and applied["run"] == session.run_id
        assert applied["request_id"] == request["request_id"] == entry.request_id
        assert open_intents(ledger) == []
        assert applied["agent_url"] == servers["node-0"].url and applied["lease_s"] == 7
        assert applied["inverse"] == {"method": "DELETE",
                                      "url": f"{servers['node-0'].url}/v1/faults/{entry.id}"}
        assert applied["pid"] == os.getpid() and TOKEN not in ledger.read_text()
        session.close()
        [state] = read_ledger(ledger)
        assert state["reverted_at"] is not None


def test_cleanup_reverts_what_a_dead_run_left_and_is_idempotent(tmp_path: Path) -> None:
    """A run that dies holding faults (no close), injected one by one and by a fan-out (a
    ledger event per agent's batch): cleanup reverts them, twice is a no-op."""
    with virtual_agents(tmp_path) as servers:
        home = tmp_path / "home"
        token_file = tmp_path / "token"
        token_file.write_text(TOKEN)
        config_file = tmp_path / "target.yaml"
        config_file.write_text("agents:\n" + "".join(
            f"  - {{node: {name}, url: '{s.url}', token_file: '{token_file}'}}\n"
            for name, s in servers.items()))
        dead = Session(target=target_of(servers), ledger_path=home / "ledger.jsonl")
        for gpu in (0, 1):
            dead.inject([InjectRequest("node-0", "gpu.ecc", {"gpu": gpu}, ECC)], lease_s=60)
        dead.inject([InjectRequest(node, "gpu.ecc", {"gpu": gpu}, ECC)
                          for node, gpus in (("node-0", (2, 3)), ("node-1", (0, 1, 2)))
                          for gpu in gpus], lease_s=60)
        events = [json.loads(line) for line in (home / "ledger.jsonl").read_text().splitlines()]
        batches = [e for e in events if e["event"] == "applied"]
        assert sorted(len(b.get("faults", [b])) for b in batches) == [1, 1, 2, 3]
        intents = [e for e in events if e["event"] == "intent"]
        assert sorted(len(i["requests"]) for i in intents) == [1, 1, 2, 3]
        dead.locks.release_all()  # as if its process had died
        dead.renewer.stop()
        stray = servers["node-1"].registry  # a fault no ledger here knows of
        target_of(servers).agents["node-1"].inject("gpu.ecc", {"gpu": 3}, ECC, 60)
        env = env_for(tmp_path)
        first = gameday(["cleanup", "--all-agents", "--target-config", str(config_file)], env)
        assert first.returncode == 0, first.stdout + first.stderr
        lines = first.stdout.strip().splitlines()
        assert sum(line.startswith("reverted: gpu.ecc") for line in lines) == 8, lines
        assert lines[-1] == "cleanup: 8 reverted, 0 skipped, 0 failed"
        assert active(servers) == [] and stray.faults() == []
        second = gameday(["cleanup", "--all-agents", "--target-config", str(config_file)], env)
        assert second.returncode == 0 and second.stdout.strip() == "cleanup: nothing to revert"


def test_cleanup_leaves_live_runs_alone_and_fails_on_unknown_agents(tmp_path: Path) -> None:
    with virtual_agents(tmp_path, nodes=1) as servers:
        ledger = tmp_path / "home" / "ledger.jsonl"
        live = Session(target=target_of(servers), ledger_path=ledger)
        live.inject([InjectRequest("node-0", "gpu.ecc", {"gpu": 2}, ECC)], lease_s=30)
        report = cleanup(ledger, lab_dir=None, config=TargetConfig())
        assert report.exit_code == 0 and len(report.skipped) == 1
        assert f"run still alive: run {live.run_id}" in report.skipped[0]
        forced = cleanup(ledger, lab_dir=None, config=TargetConfig(), force=True)
        assert forced.exit_code == 1 and "no token known for agent" in forced.failed[0]
        known = TargetConfig(agents=(AgentEndpoint("node-0", servers["node-0"].url,
                                                   token_env="GDSAFE_TOKEN"),))
        os.environ["GDSAFE_TOKEN"] = TOKEN
        try:
            done = cleanup(ledger, lab_dir=None, config=known, force=True)
        finally:
            del os.environ["GDSAFE_TOKEN"]
        assert done.exit_code == 0 and len(done.reverted) == 1 and active(servers) == []
        live.close()


def test_cleanup_names_faults_it_cannot_revert(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A Kubernetes-API entry with no API configured and no deadline: named, with its
    inverse (tests/safety/test_safety_cleanup_k8s.py covers reverting such faults)."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    ledger = tmp_path / "ledger.jsonl"
    append_event(ledger, "applied", "run-k8s", {
        "id": "k-1", "kind": "k8s.node_cordon", "node": "gpu-node-3", "via": "kubernetes",
        "target": {}, "agent_url": "", "reverted_at": None,
        "inverse": {"patch": "spec.unschedulable=false"}})
    report = cleanup(ledger, lab_dir=None, config=TargetConfig(), environ={})
    assert report.exit_code == 1
    (failed,) = report.failed
    assert failed.startswith("FAILED k8s.node_cordon k-1 on gpu-node-3 (ledger, run run-k8s, "
                             "via kubernetes): no Kubernetes configuration (")
    assert failed.endswith("and no deadline recorded for the node agent's reconciler; set "
                           "KUBECONFIG or GAMEDAY_K8S_API_URL, or apply the inverse "
                           "{'patch': 'spec.unschedulable=false'}")
