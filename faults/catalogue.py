"""The fault catalogue: every fault kind gameday can inject, as typed entries.

Each area (``faults.kinds.gpu``, ...) declares its kinds in a ``KINDS`` tuple; add an
area by adding its module to ``AREAS``.
"""

from faults.base import FaultKind
from faults.kinds import gpu, k8s, net, node, process, service, storage

AREAS = (gpu, net, service, k8s, storage, process, node)

#: The keys each kind of selector takes (an action's ``gpu``, ``process``, ... argument).
#: GPU selectors: the lab's and a host's (holding_shard, uuid, node, index) and a Kubernetes
#: fleet's (:mod:`gameday.targets.kubernetes.selectors`).
SELECTOR_KEYS: dict[str, tuple[str, ...]] = {
    "gpu": ("holding_shard", "uuid", "node", "index", "node_labels", "nvlink_domain",
            "percent", "seed"),
    "process": ("shard", "role", "pid", "name", "cmdline", "node", "env", "parent", "cgroup",
                "pod", "pick"),
    "storage": ("mount", "path", "pid", "cgroup", "node"),
    "link": ("node", "link", "netns"),
    "service": ("node", "name", "port", "address"),
    "node": ("name", "labels", "gpu"),  # a Kubernetes node selector (k8s.* kinds)
}

#: The typed keys of each kind of selector, dotted where nested: a ``"${var}"`` there gets
#: this type before anything runs (:mod:`gameday.experiment.variables`), so
#: ``process: {pid: "${replica_pid}"}`` with ``--var replica_pid=26928`` is the pid 26928.
SELECTOR_TYPES: dict[str, dict[str, type]] = {
    "gpu": {"holding_shard": int, "index": int},
    "process": {"shard": int, "pid": int, "parent.pid": int, "pick.count": int,
                "pick.percent": float, "pick.seed": int},
    "storage": {"pid": int},
    "service": {"port": int},
}

CATALOGUE: dict[str, FaultKind] = {kind.name: kind for area in AREAS for kind in area.KINDS}


def by_activity(module: str, func: str) -> FaultKind | None:
    """The catalogue entry an activity (``faults.gpu.ecc_error``) injects, if any."""
    for kind in CATALOGUE.values():
        if kind.module == module and kind.func == func:
            return kind
    return None
