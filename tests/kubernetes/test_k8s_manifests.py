"""deploy/kubernetes/ validated against the REAL kubernetes client's models (offline: no
cluster exists here, so admission and server-side validation are not covered)."""

from pathlib import Path

import pytest

from gameday.errors import InvalidInput
from gameday.targets.kubernetes.manifests import ValidatedDocument, validate_file, validate_manifest

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes"


def _all() -> dict[tuple[str, str], ValidatedDocument]:
    found = {}
    for path in sorted(DEPLOY.glob("*.yaml")):
        for doc in validate_file(path):
            found[(doc.kind, doc.name)] = doc
    return found


def test_every_manifest_deserialises_into_its_model() -> None:
    docs = _all()
    assert set(docs) >= {
        ("Namespace", "gameday-system"), ("DaemonSet", "gameday-agent"),
        ("ServiceAccount", "gameday-agent"), ("ClusterRole", "gameday-agent"),
        ("ClusterRoleBinding", "gameday-agent"), ("ServiceAccount", "gameday-orchestrator"),
        ("Role", "gameday-orchestrator"), ("RoleBinding", "gameday-orchestrator"),
        ("ClusterRole", "gameday-orchestrator"), ("ClusterRoleBinding", "gameday-orchestrator"),
        ("Secret", "gameday-agent-token"), ("CronJob", "gameday-weekly")}
    assert type(docs[("DaemonSet", "gameday-agent")].model).__name__ == "V1DaemonSet"
    assert type(docs[("CronJob", "gameday-weekly")].model).__name__ == "V1CronJob"


def test_the_agent_daemonset_asks_only_for_what_faults_need() -> None:
    docs = _all()
    spec = docs[("DaemonSet", "gameday-agent")].model.spec.template.spec
    assert spec.node_selector == {"nvidia.com/gpu.present": "true"}
    assert spec.service_account_name == "gameday-agent"
    assert spec.host_network is True  # link faults
    (agent,) = spec.containers
    assert agent.security_context.privileged is False
    assert agent.security_context.capabilities.drop == ["ALL"]
    assert set(agent.security_context.capabilities.add) == {"NET_ADMIN", "SYS_ADMIN", "KILL"}
    for probe in (agent.liveness_probe, agent.readiness_probe):
        assert probe.http_get.path == "/healthz" and probe.http_get.port == "agent"
    assert any(p.name == "agent" and p.container_port == 9410 for p in agent.ports)
    assert "--reconcile-kubernetes" in agent.args
    host_paths = {v.host_path.path for v in spec.volumes if v.host_path}
    assert host_paths == {"/var/lib/gameday/agent", "/dev/kmsg", "/dev/fuse", "/mnt/checkpoints"}
    secret_volumes = [v.secret.secret_name for v in spec.volumes if v.secret]
    assert secret_volumes == ["gameday-agent-token"]
    assert any(t.key == "gameday.dev/fault" for t in spec.tolerations)


def test_rbac_is_least_privilege() -> None:
    docs = _all()
    agent_rules = docs[("ClusterRole", "gameday-agent")].model.rules
    assert [(r.resources, sorted(r.verbs)) for r in agent_rules] == [(["nodes"], ["get", "patch"])]
    orchestrator = [*docs[("ClusterRole", "gameday-orchestrator")].model.rules,
                    *docs[("Role", "gameday-orchestrator")].model.rules]
    granted = {(res, verb) for rule in orchestrator for res in rule.resources
               for verb in rule.verbs}
    assert ("pods/eviction", "create") in granted and ("nodes", "patch") in granted
    assert not any("*" in res or "*" in verb for res, verb in granted)
    assert not any(verb in ("create", "update") and res in ("pods", "nodes", "secrets")
                   for res, verb in granted)
    secrets = [r for r in orchestrator if "secrets" in r.resources]
    assert [r.resource_names for r in secrets] == [["gameday-agent-token"]]
    cron = docs[("CronJob", "gameday-weekly")].model.spec
    assert cron.job_template.spec.template.spec.service_account_name == "gameday-orchestrator"
    assert cron.concurrency_policy == "Forbid"


def test_unknown_and_missing_fields_are_refused() -> None:
    base = {"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": "x", "namespace": "y"}}
    validate_manifest(base)
    with pytest.raises(InvalidInput, match=r"unknown field metadata\.labelz"):
        validate_manifest({**base, "metadata": {"name": "x", "labelz": {}}})
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
           "spec": {"containers": [{"name": "c", "image": "i", "imagee": "typo"}]}}
    with pytest.raises(InvalidInput, match=r"spec\.containers\[0\]\.imagee"):
        validate_manifest(pod)
    pod["spec"]["containers"] = [{"image": "i"}]
    with pytest.raises(InvalidInput, match="does not fit V1Pod"):
        validate_manifest(pod)
    with pytest.raises(InvalidInput, match="unsupported apiVersion/kind"):
        validate_manifest({"apiVersion": "example.com/v1", "kind": "Gadget"})
