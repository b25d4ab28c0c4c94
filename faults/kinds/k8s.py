"""Kubernetes-level fault kinds: applied through the Kubernetes API from the orchestrator.

Node faults carry a revert mark on the node (``gameday.dev/revert-by`` + the inverse),
so the agent on that node undoes them if the orchestrator is gone. Only nodes that run
a gameday agent can be selected (someone must be able to undo the mark).
"""

from faults.base import FaultKind, Param

NODE_SELECTOR_DOC = ("which node(s): {name: NODE} | {labels: {KEY: VALUE}} | "
                     "{gpu: <GPU selector>} (the nodes of those GPUs)")

_COUNT = Param("count", int, "how many of the selected nodes (first by name)", default=1,
               minimum=1, maximum=10_000)

K8S_POD_KILL = FaultKind(
    name="k8s.pod_kill",
    summary="delete pods (by namespace and labels, name or node); their controllers "
            "must recreate them",
    module="faults.k8s",
    func="pod_kill",
    coverage_layer="container",
    family="Pod failure",
    also_layers=("service",),
    injected_at={"kubernetes": "kubernetes"},
    params=(
        Param("namespace", str, "namespace of the pods", required=True),
        Param("label_selector", str, "label selector, e.g. app=shard", default=None,
              nullable=True),
        Param("name", str, "one pod by name", default=None, nullable=True),
        Param("node", str, "only pods on this node", default=None, nullable=True),
        Param("count", int, "how many of the matching pods (drawn with seed)", default=1,
              minimum=1, maximum=10_000),
        Param("grace_period_s", int, "termination grace period; 0 kills at once",
              default=0, minimum=0, maximum=3600),
        Param("seed", int, "seed of the draw among matching pods", default=0),
    ),
    seen_through="pod restarts, ReplicaSet/StatefulSet events, the service's SLIs",
    tags=("kubernetes", "pod", "kill"),
)

K8S_NODE_CORDON = FaultKind(
    name="k8s.node_cordon",
    summary="cordon nodes (unschedulable); reverted by uncordon",
    module="faults.k8s",
    func="node_cordon",
    coverage_layer="node",
    family="Node cordoned",
    injected_at={"kubernetes": "kubernetes"},
    selector="node",
    params=(_COUNT,),
    seen_through="node.spec.unschedulable; new pods go elsewhere or stay Pending",
    tags=("kubernetes", "node", "cordon"),
)

K8S_NODE_DRAIN = FaultKind(
    name="k8s.node_drain",
    summary="cordon nodes and evict their pods through the eviction API, honouring "
            "PodDisruptionBudgets (a 429 is retried, never forced); reverted by uncordon",
    module="faults.k8s",
    func="node_drain",
    coverage_layer="node",
    family="Node drained",
    also_layers=("container",),
    injected_at={"kubernetes": "kubernetes"},
    selector="node",
    params=(
        _COUNT,
        Param("eviction_attempts", int, "tries per pod while a PDB answers 429", default=10,
              minimum=1, maximum=1000),
        Param("eviction_interval_s", float, "seconds between those tries", default=1.0,
              minimum=0.0, maximum=60.0),
        Param("allow_blocked", bool, "succeed even if a PDB kept some pods on the node",
              default=False),
    ),
    seen_through="pods rescheduled elsewhere, PDB status, the service's SLIs",
    tags=("kubernetes", "node", "drain", "eviction", "pdb"),
)

K8S_NODE_TAINT = FaultKind(
    name="k8s.node_taint",
    summary="taint nodes; reverted by removing the taint",
    module="faults.k8s",
    func="node_taint",
    coverage_layer="node",
    family="Node tainted",
    injected_at={"kubernetes": "kubernetes"},
    selector="node",
    params=(
        _COUNT,
        Param("key", str, "taint key", default="gameday.dev/fault"),
        Param("value", str, "taint value", default="true"),
        Param("effect", str, "taint effect", default="NoSchedule",
              choices=("NoSchedule", "PreferNoSchedule", "NoExecute")),
    ),
    seen_through="node.spec.taints; pods without a toleration are not scheduled "
                 "(NoExecute: evicted)",
    tags=("kubernetes", "node", "taint"),
)

KINDS: tuple[FaultKind, ...] = (K8S_POD_KILL, K8S_NODE_CORDON, K8S_NODE_DRAIN, K8S_NODE_TAINT)
