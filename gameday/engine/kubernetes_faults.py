"""Kubernetes-level faults as the orchestrator applies them, through the API: the run's
Kubernetes target, node changes under revert marks, drains and pod kills.

Every node change is intended in the ledger (write-ahead, with its inverse) before the
API is asked, marked on the node (``gameday.dev/revert-by`` + the inverse, see
:mod:`gameday.kube.marks`) so that the node's agent undoes it if the run dies, and
recorded with ``via: kubernetes``; its target lock is held for the run. The node
allowlist and the GPU blast radius are checked before any node is touched. A pod kill
has no inverse: it is recorded as reverted at once (``no-inverse``).
"""

import random
import uuid
from collections.abc import Mapping
from typing import Any

from gameday.engine.session import Session
from gameday.errors import InvalidInput, TargetUnavailable
from gameday.evidence.ledger import FaultEntry, Intent
from gameday.kube.marks import Mark
from gameday.kube.nodes import PodRef
from gameday.safety.locks import target_key
from gameday.targets.kubernetes.target import VIA, KubernetesRoute, KubernetesTarget

__all__ = ["drain_nodes", "kill_pods", "kubernetes_target", "mark_nodes"]


def kubernetes_target(session: Session) -> KubernetesTarget:
    """The run's target, which must be a Kubernetes one (:class:`TargetUnavailable`)."""
    target = session.require_target()
    if not isinstance(target, KubernetesTarget):
        raise TargetUnavailable(f"Kubernetes faults need --target kubernetes (this run's "
                                f"target is {target.kind})")
    return target


def _route(target: KubernetesTarget) -> KubernetesRoute:
    if target.route is None:
        raise TargetUnavailable("target kubernetes has no API client")
    return target.route


def mark_nodes(session: Session, kind: str, action: str, selector: Mapping[str, Any],
               params: Mapping[str, Any], lease_s: float | None, *,
               taint: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """Cordon (``taint`` None) or taint the nodes ``selector`` picks (``params["count"]``
    of them), each under a revert mark one lease ahead; ``[{"id", "node", "revert_by"}]``.
    """
    target = kubernetes_target(session)
    names = target.resolve_nodes(dict(selector), count=params["count"])
    for name in names:
        session.blast_radius.check_node(name)
    session.blast_radius.check_gpus(target.gpus_on(names))
    lease = float(lease_s or session.extension.lease_s)
    applied = []
    for name in names:
        session.locks.acquire(target_key(name, {"k8s": kind}))
        now = session.clock.now()
        inverse = ({"op": "uncordon", "node": name} if taint is None
                   else {"op": "untaint", "node": name, **taint})
        mark = Mark(id=f"k8s-{uuid.uuid4().hex[:16]}", kind=kind, run=session.run_id,
                    revert_by=now + lease, inverse=inverse)
        session.injector.intend_external(Intent(
            request_id=mark.id, kind=kind, node=name, agent_url="", target={"node": name},
            params=dict(params), lease_s=lease, action=action, via=VIA,
            inverse=dict(mark.inverse)), _route(target))
        if taint is None:
            target.editor().cordon(name, mark)
        else:
            target.editor().taint(name, dict(taint), mark)
        entry = FaultEntry(
            id=mark.id, kind=kind, node=name, agent_url="", target={"node": name},
            params=dict(params), injected_at="kubernetes", applied_at=now,
            expires_at=mark.revert_by, lease_s=lease, action=action,
            details={"inverse": dict(mark.inverse)}, via=VIA, request_id=mark.id)
        session.injector.record_external(entry, _route(target))
        applied.append({"id": entry.id, "node": name, "revert_by": mark.revert_by})
    return applied


def drain_nodes(session: Session, nodes: list[str], *, attempts: int,
                interval_s: float) -> tuple[list[str], dict[str, str]]:
    """Evict every pod but DaemonSet and mirror pods from ``nodes`` (already cordoned)
    through the eviction API, never forced: the pods evicted (``ns/pod``) and those a
    PodDisruptionBudget kept, with why."""
    editor = kubernetes_target(session).editor()
    evicted: list[str] = []
    blocked: dict[str, str] = {}
    for node in nodes:
        done, stuck = editor.evict_all(editor.drainable(node), attempts=attempts,
                                       interval_s=interval_s)
        evicted += [p.label() for p in done]
        blocked.update(stuck)
        session.event("pods_evicted", node=node, evicted=[p.label() for p in done],
                      blocked=sorted(stuck))
    return evicted, blocked


def kill_pods(session: Session, kind: str, params: Mapping[str, Any],
              lease_s: float | None) -> list[str]:
    """Delete the Running pods ``params`` picks (``namespace``, ``label_selector`` or
    ``name``, ``node``, ``count`` drawn with ``seed``, ``grace_period_s``), each recorded
    as applied and reverted at once; the pods killed (``ns/pod``)."""
    target = kubernetes_target(session)
    session.blast_radius.check_namespace(params["namespace"])
    pods = _pick_pods(target, params)
    editor = target.editor()
    killed = []
    for pod in pods:
        editor.delete_pod(pod, params["grace_period_s"])
        now = session.clock.now()
        entry = FaultEntry(
            id=f"k8s-{uuid.uuid4().hex[:16]}", kind=kind, node=pod.node, agent_url="",
            target={"pod": pod.label()}, params=dict(params), injected_at="kubernetes",
            applied_at=now, expires_at=now, lease_s=float(lease_s or session.extension.lease_s),
            action="pod_kill", details={}, via=VIA)
        session.injector.record_external(entry, _route(target))
        session.ledger.record_reverted(entry.id, now, "no-inverse")
        killed.append(pod.label())
    return killed


def _pick_pods(target: KubernetesTarget, params: Mapping[str, Any]) -> list[PodRef]:
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
