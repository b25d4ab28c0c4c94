"""Kubernetes-level fault actions (Chaos Toolkit activities), for ``--target kubernetes``.

They go through the Kubernetes API from the orchestrator (the official client), are
recorded in the run's ledger with ``via: kubernetes`` and their inverse, and node
faults are also marked on the node (annotation ``gameday.dev/revert-by`` + the inverse,
see :mod:`gameday.targets.kubernetes.marks`): while the run lives it renews the deadline like a
lease;
if it dies, the agent on the node undoes the fault once the deadline passes
(``gameday agent serve --reconcile-kubernetes``).

Node selectors: ``{name: NODE}``, ``{labels: {KEY: VALUE}}`` or ``{gpu: <GPU selector>}``
(the nodes holding those GPUs, e.g. ``{gpu: {holding_shard: 0}}``); ``count`` nodes, first
by name. Only nodes running a gameday agent are accepted. The blast radius counts the
GPUs of every node faulted; the target configuration's ``allow.nodes`` and
``allow.namespaces`` apply.
"""

import random
import uuid
from collections.abc import Callable
from typing import Any

from chaoslib.exceptions import ActivityFailed

from faults._activity import failing_activity, revert_run, validated
from gameday.engine import session as sessions
from gameday.errors import BlastRadiusExceeded, InvalidInput, TargetUnavailable
from gameday.evidence.ledger import FaultEntry, Intent
from gameday.kinds import KindParams, KindSpec
from gameday.kinds.k8s import K8S_NODE_CORDON, K8S_NODE_DRAIN, K8S_NODE_TAINT, K8S_POD_KILL
from gameday.safety.locks import target_key
from gameday.targets.kubernetes.marks import Mark
from gameday.targets.kubernetes.nodes import NodeEditor, PodRef
from gameday.targets.kubernetes.target import VIA, KubernetesTarget

__all__ = ["node_cordon", "node_drain", "node_taint", "pod_kill", "revert"]


def node_cordon(node: dict[str, Any], count: int = 1,
                lease_s: float | None = None) -> dict[str, Any]:
    """Cordon the selected node(s): nothing new is scheduled there until reverted
    (uncordon). A node already cordoned by someone else is refused.

    Returns ``{"faults": [{"id", "node", "revert_by"}]}``.
    """
    params = validated(K8S_NODE_CORDON, {"count": count})
    return _on_nodes(K8S_NODE_CORDON, "node_cordon", node, params, lease_s,
                     lambda editor, name, mark: editor.cordon(name, mark),
                     lambda name: {"op": "uncordon", "node": name})


def node_taint(node: dict[str, Any], key: str = "gameday.dev/fault", value: str = "true",
               effect: str = "NoSchedule", count: int = 1,
               lease_s: float | None = None) -> dict[str, Any]:
    """Add the taint ``key=value:effect`` to the selected node(s); reverted by removing
    it. A node that already has a taint with this key and effect is refused."""
    params = validated(K8S_NODE_TAINT, {"count": count, "key": key, "value": value,
                                        "effect": effect})
    taint = {"key": params["key"], "value": params["value"], "effect": params["effect"]}
    return _on_nodes(K8S_NODE_TAINT, "node_taint", node, params, lease_s,
                     lambda editor, name, mark: editor.taint(name, taint, mark),
                     lambda name: {"op": "untaint", "node": name, **taint})


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
    params = validated(K8S_NODE_DRAIN, {"count": count, "eviction_attempts": eviction_attempts,
                                        "eviction_interval_s": eviction_interval_s,
                                        "allow_blocked": allow_blocked})
    result = _on_nodes(K8S_NODE_DRAIN, "node_drain", node, params, lease_s,
                       lambda editor, name, mark: editor.cordon(name, mark),
                       lambda name: {"op": "uncordon", "node": name})
    session = sessions.current()
    with failing_activity():
        editor = _kubernetes(session).editor()
        evicted: list[str] = []
        blocked: dict[str, str] = {}
        for fault in result["faults"]:
            pods = editor.drainable(fault["node"])
            done, stuck = editor.evict_all(pods, attempts=params["eviction_attempts"],
                                           interval_s=params["eviction_interval_s"])
            evicted += [p.label() for p in done]
            blocked.update(stuck)
            session.event("pods_evicted", node=fault["node"], evicted=[p.label() for p in done],
                          blocked=sorted(stuck))
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
    params = validated(K8S_POD_KILL, {"namespace": namespace, "label_selector": label_selector,
                                      "name": name, "node": node, "count": count,
                                      "grace_period_s": grace_period_s, "seed": seed})
    session = sessions.current()
    with failing_activity():
        target = _kubernetes(session)
        session.check_namespace(params["namespace"])
        pods = _pick_pods(target, params)
        editor = target.editor()
        killed = []
        for pod in pods:
            editor.delete_pod(pod, params["grace_period_s"])
            now = session.clock.now()
            entry = FaultEntry(
                id=f"k8s-{uuid.uuid4().hex[:16]}", kind=K8S_POD_KILL.name, node=pod.node,
                agent_url="", target={"pod": pod.label()}, params=params,
                injected_at="kubernetes", applied_at=now, expires_at=now,
                lease_s=float(lease_s or session.extension.lease_s), action="pod_kill",
                details={}, via=VIA)
            session.record_external(entry, _route(target))
            session.ledger.record_reverted(entry.id, now, "no-inverse")
            killed.append(pod.label())
    return {"killed": killed}


def revert() -> dict[str, Any]:
    """Revert every fault this run applied (idempotent): uncordon, untaint, and the
    agents' faults; fails if any could not be reverted."""
    return revert_run()


# -- internals ------------------------------------------------------------------------

def _kubernetes(session: sessions.Session) -> KubernetesTarget:
    target = session.require_target()
    if not isinstance(target, KubernetesTarget):
        raise TargetUnavailable(f"Kubernetes faults need --target kubernetes (this run's "
                                f"target is {target.kind})")
    return target


def _route(target: KubernetesTarget) -> Any:
    if target.route is None:
        raise TargetUnavailable("target kubernetes has no API client")
    return target.route


def _on_nodes(kind: KindSpec[KindParams], action: str, selector: dict[str, Any],
              params: dict[str, Any],
              lease_s: float | None,
              apply: Callable[[NodeEditor, str, Mark], None],
              inverse: Callable[[str], dict[str, str]]) -> dict[str, Any]:
    session = sessions.current()
    applied = []
    with failing_activity():
        target = _kubernetes(session)
        names = target.resolve_nodes(selector, count=params["count"])
        for name in names:
            if not session.target_config.node_allowed(name):
                raise BlastRadiusExceeded(f"node {name} is not in the allowlist of "
                                          f"{session.target_config.source}; nothing injected")
        session.check_blast_radius(target.gpus_on(names))
        lease = float(lease_s or session.extension.lease_s)
        for name in names:
            session.locks.acquire(target_key(name, {"k8s": kind.name}))
            now = session.clock.now()
            mark = Mark(id=f"k8s-{uuid.uuid4().hex[:16]}", kind=kind.name,
                        run=session.run_id, revert_by=now + lease, inverse=inverse(name))
            session.intend_external(Intent(
                request_id=mark.id, kind=kind.name, node=name, agent_url="",
                target={"node": name}, params=params, lease_s=lease, action=action, via=VIA,
                inverse=dict(mark.inverse)), _route(target))
            apply(target.editor(), name, mark)
            entry = FaultEntry(
                id=mark.id, kind=kind.name, node=name, agent_url="",
                target={"node": name}, params=params, injected_at="kubernetes",
                applied_at=now, expires_at=mark.revert_by, lease_s=lease, action=action,
                details={"inverse": dict(mark.inverse)}, via=VIA, request_id=mark.id)
            session.record_external(entry, _route(target))
            applied.append({"id": entry.id, "node": name, "revert_by": mark.revert_by})
    return {"faults": applied}


def _pick_pods(target: KubernetesTarget, params: dict[str, Any]) -> list[PodRef]:
    from kubernetes.client.exceptions import ApiException

    namespace = params["namespace"]
    try:
        if params["name"]:
            pods = [target.core.read_namespaced_pod(params["name"], namespace)]
        else:
            field = f"spec.nodeName={params['node']}" if params["node"] else None
            pods = target.core.list_namespaced_pod(
                namespace, label_selector=params["label_selector"], field_selector=field).items
    except ApiException as exc:
        raise TargetUnavailable(f"kubernetes API: list pods in {namespace}: {exc.status} "
                                f"{exc.reason}") from None
    running = sorted((PodRef(namespace, p.metadata.name, p.spec.node_name or "")
                      for p in pods if p.status is not None and p.status.phase == "Running"
                      and p.metadata.deletion_timestamp is None),
                     key=lambda r: r.name)
    if not running:
        raise InvalidInput(f"no Running pod matches in namespace {namespace}",
                           path="arguments")
    if len(running) <= params["count"]:
        return running
    picked = random.Random(params["seed"]).sample(range(len(running)), params["count"])
    return [running[i] for i in sorted(picked)]
