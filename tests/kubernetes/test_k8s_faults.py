"""Kubernetes-level faults (cordon, taint, drain with PDBs, pod kill) applied and
reverted through the run's session and ledger.

Stand-ins: the Kubernetes API (gameday/testing/kube.py, real HTTP, the REAL ``kubernetes``
client; its eviction answers 429 while a PDB-like rule allows no disruption), the GPUs
(virtual). Real: in-process agents on loopback, the session, ledger and lease renewer.
"""

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from chaoslib.exceptions import ActivityFailed

import faults.k8s as k8s_faults
from gameday.clock import FakeClock
from gameday.engine import session as sessions
from gameday.evidence.ledger import read_ledger
from gameday.experiment.extension import BlastRadius, Extension
from gameday.kube.marks import MARKS_ANNOTATION, REVERT_BY_ANNOTATION, read_marks
from gameday.targets.kubernetes.target import kubernetes_target
from gameday.testing.kube import KubeStandin, running_standin
from tests.kubernetes.k8s_cluster import (
    AGENT_TOKEN,
    NAMESPACE,
    api_configuration,
    inprocess_agents,
    register_agent,
)


class PdbClock(FakeClock):
    """A fake clock whose sleeps can change the world (e.g. a PDB frees a disruption)."""

    def __init__(self) -> None:
        super().__init__()
        self.on_sleep: list[Any] = []
        self.sleeps = 0

    def sleep(self, seconds: float) -> None:
        self.sleeps += 1
        super().sleep(seconds)
        for hook in self.on_sleep:
            hook(self.sleeps)


@pytest.fixture
def world(tmp_path: Path) -> Iterator[tuple[KubeStandin, sessions.Session, PdbClock]]:
    clock = PdbClock()
    with running_standin() as api, inprocess_agents(tmp_path, ["n0", "n1", "n2"]) as fleet:
        api.add_secret(NAMESPACE, "gameday-agent-token", {"token": AGENT_TOKEN})
        for server in fleet.servers:
            register_agent(api, server.node, server.url, {"pool": "train"})
        target = kubernetes_target(api_configuration(api), clock=clock)
        session = sessions.activate(sessions.Session(
            target=target, ledger_path=tmp_path / "home" / "ledger.jsonl",
            extension=Extension(lease_s=30), clock=clock))
        try:
            yield api, session, clock
        finally:
            session.close()
            sessions.deactivate()


def _node(api: KubeStandin, name: str) -> dict[str, Any]:
    with api.lock:
        return json.loads(json.dumps(api.nodes[name]))


def test_cordon_is_marked_recorded_and_reverted(world: Any, tmp_path: Path) -> None:
    api, session, _ = world
    result = k8s_faults.node_cordon({"name": "n0"}, lease_s=20)
    node = _node(api, "n0")
    assert node["spec"]["unschedulable"] is True
    (mark,) = read_marks(node["metadata"]["annotations"])
    assert mark.inverse == {"op": "uncordon", "node": "n0"} and mark.id == result["faults"][0]["id"]
    assert float(node["metadata"]["annotations"][REVERT_BY_ANNOTATION]) == \
        pytest.approx(mark.revert_by, abs=0.01)
    (entry,) = session.ledger.active()
    assert entry.via == "kubernetes" and entry.inverse == {"op": "uncordon", "node": "n0"}
    # the lease renewer moves the deadline while the run lives
    session.renewer.renew_due()  # not due yet: nothing changes
    assert read_marks(_node(api, "n0")["metadata"]["annotations"])[0].revert_by == \
        mark.revert_by
    assert k8s_faults.revert() == {"reverted": 1}
    node = _node(api, "n0")
    assert "unschedulable" not in node["spec"]
    assert MARKS_ANNOTATION not in node["metadata"]["annotations"]
    events = read_ledger(tmp_path / "home" / "ledger.jsonl")
    assert [(e["kind"], e["via"], e["reason"]) for e in events] == \
        [("k8s.node_cordon", "kubernetes", "rollback")]
    # every node change was a merge patch carrying the node's resourceVersion
    assert {ct for m, _, ct in api.requests if m == "PATCH"} == {"application/merge-patch+json"}


def test_renewal_moves_the_mark_and_a_lost_mark_is_recorded(world: Any) -> None:
    api, session, clock = world
    k8s_faults.node_cordon({"name": "n1"}, lease_s=3)
    (entry,) = session.ledger.active()
    route = session.routes["kubernetes"]
    clock.advance(2)
    new_deadline = route.renew(entry)
    assert new_deadline == pytest.approx(clock.now() + 3)
    assert read_marks(_node(api, "n1")["metadata"]["annotations"])[0].revert_by == \
        pytest.approx(new_deadline, abs=0.01)
    # someone (the reconciler) undid it meanwhile: the renewer records the loss
    api.patch_node_directly("n1", {"spec": {"unschedulable": None}, "metadata": {
        "annotations": {MARKS_ANNOTATION: None, REVERT_BY_ANNOTATION: None}}})
    clock.advance(5)
    session.renewer.renew_due()
    assert session.ledger.active() == []
    assert session.ledger.entries()[0].revert_reason == "lease-lost"


def test_taint_and_refusals(world: Any) -> None:
    api, session, _ = world
    k8s_faults.node_taint({"labels": {"pool": "train"}}, effect="NoExecute", count=2)
    for name in ("n0", "n1"):
        assert _node(api, name)["spec"]["taints"] == [
            {"key": "gameday.dev/fault", "value": "true", "effect": "NoExecute"}]
    assert "taints" not in _node(api, "n2")["spec"]
    with pytest.raises(ActivityFailed, match=r"already has taint gameday\.dev/fault:NoExecute"):
        k8s_faults.node_taint({"name": "n0"}, effect="NoExecute")
    api.patch_node_directly("n2", {"spec": {"unschedulable": True}})
    with pytest.raises(ActivityFailed, match="n2 is already cordoned \\(not by gameday\\)"):
        k8s_faults.node_cordon({"name": "n2"})
    with pytest.raises(ActivityFailed, match="matches no node"):
        k8s_faults.node_cordon({"name": "nope"})
    assert session.close() == []
    assert all("taints" not in _node(api, n)["spec"] for n in ("n0", "n1"))
    assert _node(api, "n2")["spec"]["unschedulable"] is True  # not ours: left alone


def test_blast_radius_counts_the_gpus_of_a_faulted_node(world: Any) -> None:
    api, session, _ = world
    session.blast_radius.limits = BlastRadius(max_gpus=4)
    with pytest.raises(ActivityFailed, match="8 GPUs would be faulted"):
        k8s_faults.node_cordon({"labels": {"pool": "train"}}, count=2)
    assert session.ledger.entries() == []
    assert all("unschedulable" not in _node(api, n)["spec"] for n in ("n0", "n1"))


def _workload(api: KubeStandin) -> None:
    api.add_pod("gameday-system", "agent-on-n0", "n0", owner_kind="DaemonSet")
    api.add_pod("serving", "web-1", "n0", labels={"app": "web"})
    api.add_pod("serving", "db-0", "n0", labels={"app": "db"})
    api.add_pod("serving", "web-2", "n1", labels={"app": "web"})


def test_drain_honours_a_pdb_and_never_forces(world: Any) -> None:
    api, session, clock = world
    _workload(api)
    pdb = api.add_pdb("serving", {"app": "db"}, allowed=0)
    with pytest.raises(ActivityFailed, match=r"1 pod\(s\) kept by a PodDisruptionBudget .*"
                                             r"serving/db-0: eviction refused \(429\)"):
        k8s_faults.node_drain({"name": "n0"}, eviction_attempts=3, eviction_interval_s=2.0)
    assert ("serving", "db-0") in api.pods  # not forced
    assert ("serving", "web-1") not in api.pods  # evicted
    assert ("gameday-system", "agent-on-n0") in api.pods  # DaemonSet pod: skipped
    assert clock.sleeps == 2 and pdb.disruptions_allowed == 0
    evictions = [p for m, p, _ in api.requests if p.endswith("/db-0/eviction")]
    assert len(evictions) == 3
    assert not any(m == "DELETE" for m, _, _ in api.requests)
    # the cordon is in the ledger; the rollback uncordons
    (entry,) = session.ledger.active()
    assert entry.kind == "k8s.node_drain" and _node(api, "n0")["spec"]["unschedulable"]
    assert session.close() == []
    assert "unschedulable" not in _node(api, "n0")["spec"]


def test_drain_retries_a_429_until_the_budget_allows(world: Any) -> None:
    api, _, clock = world
    _workload(api)
    pdb = api.add_pdb("serving", {"app": "db"}, allowed=0)
    clock.on_sleep.append(lambda n: setattr(pdb, "disruptions_allowed", 1) if n == 2 else None)
    result = k8s_faults.node_drain({"name": "n0"}, eviction_attempts=5,
                                   eviction_interval_s=1.0)
    assert sorted(result["evicted"]) == ["serving/db-0", "serving/web-1"]
    assert result["blocked"] == {} and clock.sleeps == 2


def test_pod_kill_has_no_inverse(world: Any) -> None:
    api, session, _ = world
    _workload(api)
    result = k8s_faults.pod_kill("serving", label_selector="app=web", count=1)
    assert len(result["killed"]) == 1
    assert sum(1 for ns, n in api.pods if n.startswith("web-")) == 1
    (entry,) = session.ledger.entries()
    assert entry.via == "kubernetes" and entry.revert_reason == "no-inverse"
    assert session.ledger.active() == []
    with pytest.raises(ActivityFailed, match="no Running pod matches in namespace serving"):
        k8s_faults.pod_kill("serving", label_selector="app=none")


def test_kubernetes_faults_need_the_kubernetes_target(tmp_path: Path) -> None:
    session = sessions.activate(sessions.Session())
    try:
        with pytest.raises(ActivityFailed, match="needs a target"):
            k8s_faults.node_cordon({"name": "n0"})
    finally:
        session.close()
        sessions.deactivate()


def test_the_target_allowlists_apply(world: Any) -> None:
    from gameday.safety.targetconfig import TargetConfig

    api, session, _ = world
    _workload(api)
    session.blast_radius.config = TargetConfig(allowed_nodes=frozenset({"n1"}),
                                          allowed_namespaces=frozenset({"canary"}),
                                          source="target.yaml")
    with pytest.raises(ActivityFailed, match="namespace serving is not in the allowlist"):
        k8s_faults.pod_kill("serving", label_selector="app=web")
    with pytest.raises(ActivityFailed, match="node n0 is not in the allowlist"):
        k8s_faults.node_cordon({"name": "n0"})
    assert ("serving", "web-1") in api.pods and "unschedulable" not in _node(api, "n0")["spec"]
    assert session.ledger.entries() == []
