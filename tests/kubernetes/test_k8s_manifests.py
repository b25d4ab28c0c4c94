"""deploy/kubernetes/ validated against the REAL kubernetes client's models (offline: no
cluster exists here, so admission and server-side validation are not covered), the
DaemonSet's arguments against the real ``gameday agent serve`` parser, its policy against
``gameday agent policy --check``, and the CronJob ``gameday schedule`` emits likewise."""

from pathlib import Path
from typing import Any

import pytest
import yaml

from gameday.agent.policy import load_policy
from gameday.agent.serve import check_policy, serve_parser
from gameday.errors import InvalidInput
from gameday.gamedays.playbook import load_playbook
from gameday.gamedays.schedule import cronjob
from gameday.kinds import CATALOGUE
from gameday.targets.agent_tls import ENVIRONMENT
from gameday.targets.kubernetes.discovery import agent_server_name
from gameday.targets.kubernetes.manifests import ValidatedDocument, validate_file, validate_manifest

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy" / "kubernetes"


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
        ("Secret", "gameday-agent-token"), ("CronJob", "gameday-weekly"),
        ("ConfigMap", "gameday-agent-policy"), ("NetworkPolicy", "gameday-agent")}
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
    for probe in (agent.liveness_probe, agent.readiness_probe):  # no client cert: TCP
        assert probe.http_get is None and probe.tcp_socket.port == "agent"
    assert any(p.name == "agent" and p.container_port == 9410 for p in agent.ports)
    assert "--reconcile-kubernetes" in agent.args
    host_paths = {v.host_path.path for v in spec.volumes if v.host_path}
    assert host_paths == {"/var/lib/gameday/agent", "/dev/kmsg", "/dev/fuse", "/mnt/checkpoints"}
    secret_volumes = [v.secret.secret_name for v in spec.volumes if v.secret]
    assert secret_volumes == ["gameday-agent-token", "gameday-agent-tls"]
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


def _mounted(spec: Any, container: Any, path: str) -> tuple[Any, str]:
    """The volume that holds ``path`` in ``container`` and the file's name in it."""
    for mount in container.volume_mounts:
        if path.startswith(mount.mount_path.rstrip("/") + "/"):
            (volume,) = [v for v in spec.volumes if v.name == mount.name]
            return volume, path[len(mount.mount_path.rstrip("/")) + 1:]
    raise AssertionError(f"{path} is on no volume of {container.name}")


def _expanded(args: list[str], env: list[Any]) -> list[str]:
    """``$(VAR)`` in arguments replaced as the kubelet does (with a stand-in value)."""
    names = {e.name for e in env}
    out = []
    for arg in args:
        for name in names:
            arg = arg.replace(f"$({name})", f"value-of-{name.lower()}")
        out.append(arg)
    return out


def test_the_daemonset_serves_mutual_tls_with_a_policy_the_agent_accepts(
        tmp_path: Path) -> None:
    docs = _all()
    spec = docs[("DaemonSet", "gameday-agent")].model.spec.template.spec
    (agent,) = spec.containers
    assert agent.command == ["gameday", "agent", "serve"]
    args = serve_parser().parse_args(_expanded(agent.args, agent.env))  # the real parser
    assert args.backend == "host" and not args.insecure_plaintext
    assert args.tls_cert and args.tls_key and args.tls_client_ca
    for path, key in ((args.tls_cert, "tls.crt"), (args.tls_key, "tls.key"),
                      (args.tls_client_ca, "ca.crt")):  # the cert-manager Secret shape
        volume, name = _mounted(spec, agent, path)
        assert volume.secret.secret_name == "gameday-agent-tls" and name == key
    volume, name = _mounted(spec, agent, args.policy)
    configmap = docs[("ConfigMap", volume.config_map.name)].model
    policy_file = tmp_path / name
    policy_file.write_text(configmap.data[name], encoding="utf-8")
    assert check_policy(["--check", str(policy_file)]) == 0
    policy = load_policy(policy_file)
    agent_kinds = {k for k in CATALOGUE if not k.startswith("k8s.")}
    assert policy.kinds <= agent_kinds and "process.pause" in policy.kinds
    storage_mounts = {m.mount_path for m in agent.volume_mounts if m.mount_propagation}
    assert set(policy.paths) == storage_mounts  # the storage it may fault is mounted
    assert policy.process_cgroups == ("/kubepods",) and not policy.gpu_device_settings
    assert any(a.startswith("--listen=") and a.endswith(":9410") for a in agent.args)


def test_only_orchestrator_pods_may_reach_the_agent_port() -> None:
    docs = _all()
    netpol = docs[("NetworkPolicy", "gameday-agent")].model.spec
    assert netpol.pod_selector.match_labels == {"app.kubernetes.io/name": "gameday-agent"}
    assert netpol.policy_types == ["Ingress"]
    (rule,) = netpol.ingress
    assert [(p.protocol, p.port) for p in rule.ports] == [("TCP", 9410)]
    (peer,) = rule._from
    assert peer.ip_block is None and peer.namespace_selector is None
    allowed = peer.pod_selector.match_labels
    cron = docs[("CronJob", "gameday-weekly")].model.spec.job_template.spec.template
    assert allowed.items() <= cron.metadata.labels.items()


def _orchestrator_reaches_agents_with_mtls(pod: Any) -> None:
    (container,) = pod.spec.containers
    env = {e.name: e.value for e in container.env}
    files = {env[ENVIRONMENT[k]] for k in ("agent_ca", "agent_client_cert", "agent_client_key")}
    for path in files:
        volume, name = _mounted(pod.spec, container, path)
        assert volume.secret.secret_name == "gameday-orchestrator-tls"
        assert name in ("ca.crt", "tls.crt", "tls.key")
    assert pod.metadata.labels["gameday.dev/role"] == "orchestrator"
    assert pod.spec.service_account_name == "gameday-orchestrator"
    assert pod.spec.security_context.fs_group == container.security_context.run_as_user


def test_the_shipped_and_the_emitted_cronjob_reach_agents_with_mutual_tls() -> None:
    docs = _all()
    _orchestrator_reaches_agents_with_mtls(
        docs[("CronJob", "gameday-weekly")].model.spec.job_template.spec.template)
    emitted = validate_manifest(cronjob(load_playbook(ROOT / "playbooks" /
                                                      "weekly-cluster.yaml")))
    assert emitted.document["metadata"]["namespace"] == "gameday-system"
    _orchestrator_reaches_agents_with_mtls(emitted.model.spec.job_template.spec.template)


def test_the_cert_manager_example_issues_the_secrets_the_pods_mount() -> None:
    documents = list(yaml.safe_load_all(
        (DEPLOY / "cert-manager" / "agent-certificates.yaml").read_text(encoding="utf-8")))
    certificates = {d["spec"]["secretName"]: d["spec"] for d in documents
                    if d["kind"] == "Certificate" and not d["spec"].get("isCA")}
    assert certificates["gameday-agent-tls"]["usages"] == ["server auth"]
    assert certificates["gameday-orchestrator-tls"]["usages"] == ["client auth"]
    issuers = {d["spec"]["issuerRef"]["name"] for d in documents if d["kind"] == "Certificate"
               and not d["spec"].get("isCA")}
    assert issuers == {"gameday-ca"}  # one CA signs both: ca.crt checks either side
    # the name discovery checks in the agents' certificates by default
    assert certificates["gameday-agent-tls"]["dnsNames"] == [agent_server_name("gameday-system")]
