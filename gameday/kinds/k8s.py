"""Kubernetes-level fault kinds: applied through the Kubernetes API from the orchestrator.

Node faults carry a revert mark on the node (``gameday.dev/revert-by`` + the inverse),
so the agent on that node undoes them if the orchestrator is gone. Only nodes that run
a gameday agent can be selected (someone must be able to undo the mark).
"""

from dataclasses import dataclass
from typing import Literal

from gameday.kinds.gpu import GPU_SELECTOR
from gameday.kinds.params import param, required
from gameday.kinds.selectors import Selector, SelectorKey
from gameday.kinds.spec import KindParams, KindSpec

__all__ = ["K8S_NODE_CORDON", "K8S_NODE_DRAIN", "K8S_NODE_TAINT", "K8S_POD_KILL", "KINDS",
           "NODE_SELECTOR", "CordonParams", "DrainParams", "PodKillParams", "TaintParams"]

NODE_SELECTOR = Selector(
    argument="node",
    doc="which node(s): {name: NODE} | {labels: {KEY: VALUE}} | {gpu: <GPU selector>} (the "
        "nodes of those GPUs)",
    keys=(SelectorKey("name", (str, list), "the node with this name"),
          SelectorKey("labels", (dict,), "the nodes with these labels", labels=True),
          SelectorKey("gpu", (dict,), "the nodes of the GPUs this GPU selector picks",
                      nested=GPU_SELECTOR)),
    nullable=False)

_COUNT_DOC = "how many of the selected nodes (first by name)"


@dataclass(frozen=True, kw_only=True)
class PodKillParams(KindParams):
    """``k8s.pod_kill``'s parameters."""

    namespace: str = required("namespace of the pods")
    label_selector: str | None = param("label selector, e.g. app=shard", default=None)
    name: str | None = param("one pod by name", default=None)
    node: str | None = param("only pods on this node", default=None)
    count: int = param("how many of the matching pods (drawn with seed)", default=1,
                       minimum=1, maximum=10_000)
    grace_period_s: int = param("termination grace period; 0 kills at once", default=0,
                                minimum=0, maximum=3600)
    seed: int = param("seed of the draw among matching pods", default=0)


@dataclass(frozen=True, kw_only=True)
class CordonParams(KindParams):
    """``k8s.node_cordon``'s parameters."""

    count: int = param(_COUNT_DOC, default=1, minimum=1, maximum=10_000)


@dataclass(frozen=True, kw_only=True)
class DrainParams(KindParams):
    """``k8s.node_drain``'s parameters."""

    count: int = param(_COUNT_DOC, default=1, minimum=1, maximum=10_000)
    eviction_attempts: int = param("tries per pod while a PDB answers 429", default=10,
                                   minimum=1, maximum=1000)
    eviction_interval_s: float = param("seconds between those tries", default=1.0,
                                       minimum=0.0, maximum=60.0)
    allow_blocked: bool = param("succeed even if a PDB kept some pods on the node",
                                default=False)


@dataclass(frozen=True, kw_only=True)
class TaintParams(KindParams):
    """``k8s.node_taint``'s parameters."""

    count: int = param(_COUNT_DOC, default=1, minimum=1, maximum=10_000)
    key: str = param("taint key", default="gameday.dev/fault")
    value: str = param("taint value", default="true")
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] = param(
        "taint effect", default="NoSchedule")


K8S_POD_KILL = KindSpec(
    name="k8s.pod_kill",
    summary="delete pods (by namespace and labels, name or node); their controllers "
            "must recreate them",
    module="faults.k8s",
    func="pod_kill",
    coverage_layer="container",
    family="Pod failure",
    also_layers=("service",),
    injected_at={"kubernetes": "kubernetes"},
    params_type=PodKillParams,
    seen_through="pod restarts, ReplicaSet/StatefulSet events, the service's SLIs",
    tags=("kubernetes", "pod", "kill"),
)

K8S_NODE_CORDON = KindSpec(
    name="k8s.node_cordon",
    summary="cordon nodes (unschedulable); reverted by uncordon",
    module="faults.k8s",
    func="node_cordon",
    coverage_layer="node",
    family="Node cordoned",
    injected_at={"kubernetes": "kubernetes"},
    selects=NODE_SELECTOR,
    params_type=CordonParams,
    seen_through="node.spec.unschedulable; new pods go elsewhere or stay Pending",
    tags=("kubernetes", "node", "cordon"),
)

K8S_NODE_DRAIN = KindSpec(
    name="k8s.node_drain",
    summary="cordon nodes and evict their pods through the eviction API, honouring "
            "PodDisruptionBudgets (a 429 is retried, never forced); reverted by uncordon",
    module="faults.k8s",
    func="node_drain",
    coverage_layer="node",
    family="Node drained",
    also_layers=("container",),
    injected_at={"kubernetes": "kubernetes"},
    selects=NODE_SELECTOR,
    params_type=DrainParams,
    seen_through="pods rescheduled elsewhere, PDB status, the service's SLIs",
    tags=("kubernetes", "node", "drain", "eviction", "pdb"),
)

K8S_NODE_TAINT = KindSpec(
    name="k8s.node_taint",
    summary="taint nodes; reverted by removing the taint",
    module="faults.k8s",
    func="node_taint",
    coverage_layer="node",
    family="Node tainted",
    injected_at={"kubernetes": "kubernetes"},
    selects=NODE_SELECTOR,
    params_type=TaintParams,
    seen_through="node.spec.taints; pods without a toleration are not scheduled "
                 "(NoExecute: evicted)",
    tags=("kubernetes", "node", "taint"),
)

KINDS: tuple[KindSpec[KindParams], ...] = (K8S_POD_KILL, K8S_NODE_CORDON, K8S_NODE_DRAIN,
                                           K8S_NODE_TAINT)
