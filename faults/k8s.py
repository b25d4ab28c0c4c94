"""Kubernetes-level fault actions (Chaos Toolkit activities), for ``--target kubernetes``.

They go through the Kubernetes API from the orchestrator (the official client), are
recorded in the run's ledger with ``via: kubernetes`` and their inverse, and node
faults are also marked on the node (annotation ``gameday.dev/revert-by`` + the inverse,
see :mod:`gameday.kube.marks`): while the run lives it renews the deadline like a
lease;
if it dies, the agent on the node undoes the fault once the deadline passes
(``gameday agent serve --reconcile-kubernetes``).

Node selectors: ``{name: NODE}``, ``{labels: {KEY: VALUE}}`` or ``{gpu: <GPU selector>}``
(the nodes holding those GPUs, e.g. ``{gpu: {holding_shard: 0}}``); ``count`` nodes, first
by name. Only nodes running a gameday agent are accepted. The blast radius counts the
GPUs of every node faulted; the target configuration's ``allow.nodes`` and
``allow.namespaces`` apply.
"""

from typing import Any

from chaoslib.exceptions import ActivityFailed

from gameday import activity
from gameday.kinds import KindParams, KindSpec
from gameday.kinds.k8s import K8S_NODE_CORDON, K8S_NODE_DRAIN, K8S_NODE_TAINT, K8S_POD_KILL

__all__ = ["node_cordon", "node_drain", "node_taint", "pod_kill", "revert"]


def node_cordon(node: dict[str, Any], count: int = 1,
                lease_s: float | None = None) -> dict[str, Any]:
    """Cordon the selected node(s): nothing new is scheduled there until reverted
    (uncordon). A node already cordoned by someone else is refused.

    Returns ``{"faults": [{"id", "node", "revert_by"}]}``.
    """
    params = activity.validated(K8S_NODE_CORDON, {"count": count})
    return _on_nodes(K8S_NODE_CORDON, "node_cordon", node, params, lease_s)


def node_taint(node: dict[str, Any], key: str = "gameday.dev/fault", value: str = "true",
               effect: str = "NoSchedule", count: int = 1,
               lease_s: float | None = None) -> dict[str, Any]:
    """Add the taint ``key=value:effect`` to the selected node(s); reverted by removing
    it. A node that already has a taint with this key and effect is refused."""
    params = activity.validated(K8S_NODE_TAINT, {"count": count, "key": key, "value": value,
                                                 "effect": effect})
    taint = {"key": params["key"], "value": params["value"], "effect": params["effect"]}
    return _on_nodes(K8S_NODE_TAINT, "node_taint", node, params, lease_s, taint=taint)


def node_drain(node: dict[str, Any], count: int = 1, eviction_attempts: int = 10,
               eviction_interval_s: float = 1.0, allow_blocked: bool = False,
               lease_s: float | None = None) -> dict[str, Any]:
    """Drain the selected node(s): cordon (recorded first, reverted by uncordon), then
    evict every pod but DaemonSet and mirror pods through the eviction API.

    A PodDisruptionBudget that allows no disruption makes the API answer 429: the
    eviction is retried ``eviction_attempts`` times, ``eviction_interval_s`` apart, and
    never forced. Pods still blocked then fail the action (the cordon stays recorded and
    is reverted by the rollback) unless ``allow_blocked``. Evicted pods are not brought
    back by the revert: their controllers recreate them elsewhere.

    Returns ``{"faults": [...], "evicted": ["ns/pod", ...], "blocked": {"ns/pod": why}}``.
    """
    params = activity.validated(K8S_NODE_DRAIN, {
        "count": count, "eviction_attempts": eviction_attempts,
        "eviction_interval_s": eviction_interval_s, "allow_blocked": allow_blocked})
    result = _on_nodes(K8S_NODE_DRAIN, "node_drain", node, params, lease_s)
    with activity.failing():
        evicted, blocked = activity.drain_nodes(
            [fault["node"] for fault in result["faults"]],
            attempts=params["eviction_attempts"], interval_s=params["eviction_interval_s"])
    if blocked and not params["allow_blocked"]:
        first = next(iter(blocked.values()))
        raise ActivityFailed(f"k8s.node_drain: {len(blocked)} pod(s) kept by a "
                             f"PodDisruptionBudget ({first}); evicted {len(evicted)}; the "
                             "cordon is reverted by the rollback")
    return {**result, "evicted": evicted, "blocked": blocked}


def pod_kill(namespace: str, label_selector: str | None = None, name: str | None = None,
             node: str | None = None, count: int = 1, grace_period_s: int = 0,
             seed: int = 0, lease_s: float | None = None) -> dict[str, Any]:
    """Delete ``count`` Running pods of ``namespace`` matching ``label_selector`` (and
    ``node``), or the pod ``name``; drawn with ``seed`` among the matches. There is no
    inverse: the ledger records the kill as reverted at once (``no-inverse``), and the
    pods' controllers must recreate them.

    Returns ``{"killed": ["ns/pod", ...]}``.
    """
    params = activity.validated(K8S_POD_KILL, {
        "namespace": namespace, "label_selector": label_selector, "name": name, "node": node,
        "count": count, "grace_period_s": grace_period_s, "seed": seed})
    with activity.failing():
        killed = activity.kill_pods(K8S_POD_KILL.name, params, lease_s)
    return {"killed": killed}


def revert() -> dict[str, Any]:
    """Revert every fault this run applied (idempotent): uncordon, untaint, and the
    agents' faults; fails if any could not be reverted."""
    return activity.revert_all()


# -- internals ------------------------------------------------------------------------

def _on_nodes(kind: KindSpec[KindParams], action: str, selector: dict[str, Any],
              params: dict[str, Any], lease_s: float | None, *,
              taint: dict[str, str] | None = None) -> dict[str, Any]:
    with activity.failing():
        return {"faults": activity.mark_nodes(kind.name, action, selector, params, lease_s,
                                              taint=taint)}
