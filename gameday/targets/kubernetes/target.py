"""``--target kubernetes``: a :class:`Target` whose agents are discovered through the API.

:func:`kubernetes_target` configures the official client (:mod:`gameday.kube.config`),
finds the agent DaemonSet's pods and their GPUs (:mod:`gameday.targets.kubernetes.discovery`), and
returns a :class:`KubernetesTarget`: its ``agents`` are the discovered agents, its GPU
selectors are the richer ones of :mod:`gameday.targets.kubernetes.selectors`, its placement comes
from
the shard pods' labels, and ``route`` reverts and renews the Kubernetes-level faults
(:class:`KubernetesRoute`) that the session records with ``via="kubernetes"``.
"""

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gameday.clock import SYSTEM_CLOCK, Clock
from gameday.errors import InvalidInput, TargetUnavailable
from gameday.evidence.ledger import FaultEntry
from gameday.kube.config import KubeSettings, api_client, settings_from
from gameday.kube.nodes import NodeEditor
from gameday.targets.agent_tls import agent_tls_from
from gameday.targets.base import GpuRef, Target
from gameday.targets.kubernetes.containers import ContainerRef, find_container
from gameday.targets.kubernetes.discovery import Fleet, agent_token, discover
from gameday.targets.kubernetes.selectors import select_gpus

__all__ = ["VIA", "KubernetesRoute", "KubernetesTarget", "kubernetes_target"]

#: The ``via`` of ledger entries whose fault went through the Kubernetes API.
VIA = "kubernetes"


class KubernetesRoute:
    """Renews and reverts ``via="kubernetes"`` ledger entries through the API.

    Renewing moves the mark's ``revert_by`` to ``now + lease_s``; reverting applies the
    mark's inverse and drops the mark (idempotent: a mark already undone, e.g. by an
    agent's reconciler, is reported as such). An entry without a mark (pod kill) has
    nothing to revert.
    """

    via = VIA

    def __init__(self, editor: NodeEditor, *, clock: Clock = SYSTEM_CLOCK) -> None:
        self.editor = editor
        self.clock = clock

    def renew(self, entry: FaultEntry) -> float | None:
        """The new deadline, or ``None`` when the mark is gone (lease lost)."""
        if not entry.details.get("inverse"):
            return entry.expires_at
        revert_by = self.clock.now() + entry.lease_s
        return revert_by if self.editor.renew(entry.node, entry.id, revert_by) else None

    def revert(self, entry: FaultEntry) -> tuple[float, str]:
        """Undo the entry's change; returns (reverted_at, reason)."""
        if not entry.details.get("inverse"):
            return self.clock.now(), "no-inverse"
        undone = self.editor.undo(entry.node, lambda mark: mark.id == entry.id)
        return self.clock.now(), "requested" if undone else "already-reverted"


@dataclass
class KubernetesTarget(Target):
    """A cluster: discovered agents plus the API for Kubernetes-level faults."""

    fleet: Fleet | None = None
    settings: KubeSettings = field(default_factory=KubeSettings)
    core: Any = None
    route: KubernetesRoute | None = None

    def require_fleet(self) -> Fleet:
        if self.fleet is None:
            raise TargetUnavailable("target kubernetes was not discovered")
        return self.fleet

    def editor(self) -> NodeEditor:
        if self.route is None:
            raise TargetUnavailable("target kubernetes has no API client")
        return self.route.editor

    def gpus(self) -> list[GpuRef]:
        """Every GPU discovery found (inventories are read once, at discovery)."""
        return [gpu.ref for gpu in self.require_fleet().gpus]

    def resolve_gpus(self, selector: Mapping[str, Any], *, where: str = "gpu") -> list[GpuRef]:
        """The selectors of :mod:`gameday.targets.kubernetes.selectors` (node labels, UUID, index,
        NVLink domain, shard, percent of the fleet)."""
        return [gpu.ref for gpu in select_gpus(self.require_fleet().gpus, selector, where=where)]

    def resolve_nodes(self, selector: Mapping[str, Any], *, count: int = 1,
                      where: str = "node") -> list[str]:
        """Node names for ``{name}``, ``{labels}`` or ``{gpu: <GPU selector>}``: only
        nodes that run an agent (it undoes the revert mark), first ``count`` by name."""
        fleet = self.require_fleet()
        if not isinstance(selector, Mapping) or len(selector) != 1 or \
                next(iter(selector)) not in ("name", "labels", "gpu"):
            raise InvalidInput("a node selector is one of {name: NODE}, {labels: {...}}, "
                               "{gpu: <GPU selector>}", path=where)
        key, value = next(iter(selector.items()))
        if key == "name":
            nodes = [str(value)] if str(value) in fleet.node_labels else []
        elif key == "labels":
            if not isinstance(value, Mapping) or not value:
                raise InvalidInput("must be a non-empty mapping", path=f"{where}.labels")
            nodes = [n for n, labels in fleet.node_labels.items()
                     if all(labels.get(str(k)) == str(v) for k, v in value.items())]
        else:
            nodes = [g.node for g in self.resolve_gpus(value, where=f"{where}.gpu")]
        nodes = sorted(set(nodes))
        if not nodes:
            raise InvalidInput(f"selector {dict(selector)} matches no node", path=where)
        without = [n for n in nodes if n not in fleet.agents]
        if without:
            raise InvalidInput(f"node {without[0]} runs no ready gameday agent, so nothing "
                               "could undo a fault there if the orchestrator died", path=where)
        return nodes[:count]

    def resolve_container(self, selector: Any, *, where: str = "process.pod") -> ContainerRef:
        """The running container a ``{namespace, labels | label_selector | name,
        container}`` selector names (:mod:`gameday.targets.kubernetes.containers`), on a
        node whose agent can signal it."""
        fleet = self.require_fleet()
        if self.core is None:
            raise TargetUnavailable("target kubernetes has no API client")
        container = find_container(self.core, selector, where=where)
        if container.node not in fleet.agents:
            raise InvalidInput(f"pod {container.pod_label()} runs on node "
                               f"{container.node or '(none)'}, which runs no ready gameday "
                               "agent to signal it", path=where)
        return container

    def gpus_on(self, nodes: list[str]) -> list[GpuRef]:
        """The GPUs of these nodes (what a node fault touches, for the blast radius)."""
        return [g for g in self.gpus() if g.node in nodes]

    def placement(self) -> dict[str, Any]:
        """Shard placement: the placement URL when configured, else the shard pods'
        labels (``{"shards": [{"shard", "node", "gpu", "pod"}]}``)."""
        if self.placement_url:
            return super().placement()
        fleet = self.require_fleet()
        shards = []
        for gpu in fleet.gpus:
            for shard in gpu.shards:
                shards.append({"shard": int(shard) if shard.isdigit() else shard,
                               "node": gpu.node, "gpu": gpu.index})
        return {"shards": shards}


def kubernetes_target(configuration: Mapping[str, Any], *, clock: Clock = SYSTEM_CLOCK
                      ) -> KubernetesTarget:
    """Discover the cluster named by ``configuration`` (see
    :mod:`gameday.kube.config`)."""
    from kubernetes import client

    settings = settings_from(configuration)
    api = api_client(settings)
    core = client.CoreV1Api(api)
    token = agent_token(core, settings)
    fleet = discover(core, settings, token, agent_tls_from(configuration))
    if not fleet.agents:
        raise TargetUnavailable(
            f"target kubernetes: no ready agent pod in namespace {settings.namespace} with "
            f"labels {settings.agent_selector} (is deploy/kubernetes/agent-daemonset.yaml "
            "applied?)")
    return KubernetesTarget(
        kind="kubernetes", agents=dict(fleet.clients),
        service_url=configuration.get("service_url"),
        prometheus_url=configuration.get("prometheus_url"),
        placement_url=configuration.get("placement_url"),
        source=str(getattr(api.configuration, "host", "")),
        fleet=fleet, settings=settings, core=core,
        route=KubernetesRoute(NodeEditor(core, clock=clock), clock=clock))
