"""Node fault actions (Chaos Toolkit activities): CPU and memory hogs.

``node`` names the node (``node-0``); it may be omitted when the target has one agent.
The agent runs a real hog (``stress-ng`` when the host has it, else Python) inside a
cgroup of its own that bounds it (CPU quota, memory limit); the hog stops by itself
after ``duration_s``, and revert (or the lease lapsing) kills it and removes the cgroup.
In the lab the nodes share one machine, so a hog on a node competes with every shard,
within its bound.
"""

from typing import Any

from gameday import activity
from gameday.errors import InvalidInput
from gameday.kinds import KindParams, KindSpec
from gameday.kinds.node import NODE_CPU_HOG, NODE_MEMORY_HOG

__all__ = ["cpu_hog", "memory_hog", "revert"]


def cpu_hog(node: str | None = None, workers: int = 1, cpu_percent: float = 50.0,
            duration_s: float = 60.0, lease_s: float | None = None) -> dict[str, Any]:
    """Run ``workers`` busy workers on ``node`` for ``duration_s``, bounded by a cgroup
    CPU quota of ``cpu_percent`` percent of one CPU.

    Returns ``{"faults": [{"id", "node", "target", "injected_at", "applied_at",
    "expires_at", "details"}]}``; ``details`` names the cgroup and the bound.
    """
    params = activity.validated(NODE_CPU_HOG, {"workers": workers, "cpu_percent": cpu_percent,
                                      "duration_s": duration_s})
    return _inject(NODE_CPU_HOG, "cpu_hog", node, params, lease_s)


def memory_hog(node: str | None = None, memory_mib: int = 256, limit_mib: int | None = None,
               duration_s: float = 60.0, lease_s: float | None = None) -> dict[str, Any]:
    """Hold ``memory_mib`` MiB on ``node`` for ``duration_s`` (pages touched, kept),
    in a cgroup limited to ``limit_mib`` (default ``memory_mib`` + 48): the hog can
    never take more than that."""
    params = activity.validated(NODE_MEMORY_HOG, {"memory_mib": memory_mib, "limit_mib": limit_mib,
                                         "duration_s": duration_s})
    return _inject(NODE_MEMORY_HOG, "memory_hog", node, params, lease_s)


def revert() -> dict[str, Any]:
    """Revert every fault this run applied (idempotent); fails if any could not be reverted."""
    return activity.revert_all()



def _inject(kind: KindSpec[KindParams], action: str, node: str | None, params: dict[str, Any],
            lease_s: float | None) -> dict[str, Any]:
    session = activity.current()
    with activity.failing():
        target = session.require_target()
        if node is None:
            if len(target.agents) != 1:
                raise InvalidInput(f"name the node: target {target.kind} has "
                                   f"{len(target.agents)} ({', '.join(sorted(target.agents))})",
                                   path="node")
            node = next(iter(target.agents))
        elif node not in target.agents:
            raise InvalidInput(f"no node {node!r} in target {target.kind} (nodes: "
                               f"{', '.join(sorted(target.agents))})", path="node")
        entry = activity.inject_on_node(kind.name, node=node, target={"node": node},
                                        params=params, action=action, lease_s=lease_s)
    return activity.applied([entry])
