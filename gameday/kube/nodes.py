"""Changes to nodes and pods through the Kubernetes API, each with its revert mark.

Every node change is a read, then a JSON merge patch that carries the node's
``metadata.resourceVersion`` as a precondition: a concurrent writer (a person, the
agent's reconciler, another run) makes it fail with ``409 Conflict``, and the change is
recomputed from a fresh read (a few times, through tenacity). So a mark and the change
it describes are always written together, and nothing is lost between two writers.

A node already cordoned, or already carrying a taint with the same key and effect, is
refused (:class:`FaultRejected`): its inverse would undo someone else's change.
"""

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_none

from gameday.clock import SYSTEM_CLOCK, Clock
from gameday.errors import FaultRejected, TargetUnavailable
from gameday.kube.marks import Mark, annotations_for, read_marks, undo_patch

__all__ = ["MERGE_PATCH", "EvictionBlocked", "NodeEditor", "PodRef"]

MERGE_PATCH = "application/merge-patch+json"

#: Attempts at a node change that keeps meeting ``409 Conflict``.
CONFLICT_ATTEMPTS = 5


class EvictionBlocked(Exception):
    """The eviction API answered 429: a PodDisruptionBudget allows no disruption now."""


@dataclass(frozen=True)
class PodRef:
    namespace: str
    name: str
    node: str = ""

    def label(self) -> str:
        return f"{self.namespace}/{self.name}"


def _is_conflict(exc: BaseException) -> bool:
    return getattr(exc, "status", None) == 409


def _api_error(what: str, exc: Any) -> TargetUnavailable:
    return TargetUnavailable(f"kubernetes API: {what}: {exc.status} {exc.reason}")


class NodeEditor:
    """Node and pod changes for one cluster (``core`` is a ``CoreV1Api``)."""

    def __init__(self, core: Any, *, clock: Clock = SYSTEM_CLOCK) -> None:
        self.core = core
        self.clock = clock

    # -- reading ---------------------------------------------------------------------
    def node(self, name: str) -> dict[str, Any]:
        """The node as wire JSON (``metadata``, ``spec``, ``status``)."""
        from kubernetes.client.exceptions import ApiException

        try:
            node = self.core.read_node(name)
        except ApiException as exc:
            raise _api_error(f"read node {name}", exc) from None
        wire: dict[str, Any] = self.core.api_client.sanitize_for_serialization(node)
        return wire

    def marks(self, name: str) -> list[Mark]:
        return read_marks(self.node(name)["metadata"].get("annotations"))

    # -- the one way nodes change --------------------------------------------------------
    def update(self, name: str,
               change: Callable[[dict[str, Any], list[Mark]], dict[str, Any] | None]
               ) -> dict[str, Any] | None:
        """Read the node, let ``change(node, marks)`` build a merge patch (``None``: no
        change), and apply it under the node's resourceVersion; retried on 409."""
        from kubernetes.client.exceptions import ApiException

        def attempt() -> dict[str, Any] | None:
            node = self.node(name)
            patch = change(node, read_marks(node["metadata"].get("annotations")))
            if patch is None:
                return None
            patch.setdefault("metadata", {})["resourceVersion"] = \
                node["metadata"]["resourceVersion"]
            try:
                self.core.patch_node(name, patch, _content_type=MERGE_PATCH)
            except ApiException as exc:
                if exc.status == 409:
                    raise
                raise _api_error(f"patch node {name}", exc) from None
            return patch

        retrying = Retrying(stop=stop_after_attempt(CONFLICT_ATTEMPTS), wait=wait_none(),
                            retry=retry_if_exception(_is_conflict), reraise=True)
        try:
            return retrying(attempt)
        except ApiException as exc:
            raise _api_error(f"patch node {name} (still conflicting after "
                             f"{CONFLICT_ATTEMPTS} attempts)", exc) from None

    # -- faults ----------------------------------------------------------------------
    def cordon(self, name: str, mark: Mark) -> None:
        """Mark the node unschedulable, with ``mark`` (inverse ``uncordon``)."""
        def change(node: dict[str, Any], marks: list[Mark]) -> dict[str, Any]:
            ours = any(m.inverse.get("op") == "uncordon" for m in marks)
            if node.get("spec", {}).get("unschedulable") and not ours:
                raise FaultRejected(f"node {name} is already cordoned (not by gameday); "
                                    "uncordoning it later would undo someone else's cordon")
            return {"spec": {"unschedulable": True},
                    "metadata": {"annotations": annotations_for([*marks, mark])}}
        self.update(name, change)

    def taint(self, name: str, taint: dict[str, str], mark: Mark) -> None:
        """Add ``taint`` ({key, value, effect}) to the node, with ``mark`` (``untaint``)."""
        def change(node: dict[str, Any], marks: list[Mark]) -> dict[str, Any]:
            taints = list(node.get("spec", {}).get("taints") or [])
            for existing in taints:
                if existing.get("key") == taint["key"] and \
                        existing.get("effect") == taint["effect"]:
                    raise FaultRejected(f"node {name} already has taint {taint['key']}:"
                                        f"{taint['effect']}; refusing to own it")
            return {"spec": {"taints": [*taints, taint]},
                    "metadata": {"annotations": annotations_for([*marks, mark])}}
        self.update(name, change)

    def renew(self, name: str, mark_id: str, revert_by: float) -> bool:
        """Move a mark's deadline; ``False`` when the mark is gone (already undone)."""
        found = False

        def change(node: dict[str, Any], marks: list[Mark]) -> dict[str, Any] | None:
            nonlocal found
            found = any(m.id == mark_id for m in marks)
            if not found:
                return None
            renewed = [m.renewed(revert_by) if m.id == mark_id else m for m in marks]
            return {"metadata": {"annotations": annotations_for(renewed)}}
        self.update(name, change)
        return found

    def undo(self, name: str, select: Callable[[Mark], bool]) -> list[Mark]:
        """Apply the inverse of every mark ``select`` picks and drop those marks, in one
        patch; returns the marks undone (none when they were already gone)."""
        undone: list[Mark] = []

        def change(node: dict[str, Any], marks: list[Mark]) -> dict[str, Any] | None:
            nonlocal undone
            undone = [m for m in marks if select(m)]
            if not undone:
                return None
            remaining = [m for m in marks if not select(m)]
            patch: dict[str, Any] = {"metadata": {"annotations": annotations_for(remaining)}}
            spec = undo_patch(node.get("spec") or {}, undone, remaining)
            if spec:
                patch["spec"] = spec
            return patch
        self.update(name, change)
        return undone

    # -- pods ------------------------------------------------------------------------
    def delete_pod(self, pod: PodRef, grace_period_s: int | None = None) -> None:
        from kubernetes.client.exceptions import ApiException

        try:
            self.core.delete_namespaced_pod(pod.name, pod.namespace,
                                            grace_period_seconds=grace_period_s,
                                            _preload_content=False)
        except ApiException as exc:
            if exc.status != 404:
                raise _api_error(f"delete pod {pod.label()}", exc) from None

    def evict(self, pod: PodRef) -> None:
        """Evict through the eviction API; :class:`EvictionBlocked` on 429 (a PDB)."""
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        body = client.V1Eviction(metadata=client.V1ObjectMeta(name=pod.name,
                                                              namespace=pod.namespace))
        try:
            # the API answers a Status, not an Eviction: the body is not decoded
            self.core.create_namespaced_pod_eviction(pod.name, pod.namespace, body,
                                                     _preload_content=False)
        except ApiException as exc:
            if exc.status == 429:
                raise EvictionBlocked(f"{pod.label()}: eviction refused (429): "
                                      "a PodDisruptionBudget allows no disruption") from None
            if exc.status != 404:
                raise _api_error(f"evict pod {pod.label()}", exc) from None

    def pods_on(self, node: str, *, namespace: str | None = None,
                label_selector: str | None = None) -> list[Any]:
        """Pods (models) bound to ``node``."""
        from kubernetes.client.exceptions import ApiException

        selector = f"spec.nodeName={node}"
        try:
            if namespace:
                answer = self.core.list_namespaced_pod(namespace, field_selector=selector,
                                                       label_selector=label_selector)
            else:
                answer = self.core.list_pod_for_all_namespaces(field_selector=selector,
                                                               label_selector=label_selector)
        except ApiException as exc:
            raise _api_error(f"list pods on {node}", exc) from None
        return list(answer.items)

    def drainable(self, node: str) -> list[PodRef]:
        """Pods a drain evicts: all but DaemonSet-managed and mirror (static) pods."""
        refs = []
        for pod in self.pods_on(node):
            owners = pod.metadata.owner_references or []
            annotations = pod.metadata.annotations or {}
            if any(o.kind == "DaemonSet" for o in owners):
                continue
            if "kubernetes.io/config.mirror" in annotations:
                continue
            refs.append(PodRef(pod.metadata.namespace, pod.metadata.name, node))
        return sorted(refs, key=lambda r: (r.namespace, r.name))

    def evict_all(self, pods: Sequence[PodRef], *, attempts: int, interval_s: float
                  ) -> tuple[list[PodRef], dict[str, str]]:
        """Evict each pod, retrying a 429 ``attempts`` times ``interval_s`` apart (on the
        injected clock); never deletes instead. Returns (evicted, blocked: pod -> why)."""
        from tenacity import wait_fixed

        evicted: list[PodRef] = []
        blocked: dict[str, str] = {}
        for pod in pods:
            retrying = Retrying(stop=stop_after_attempt(attempts), wait=wait_fixed(interval_s),
                                retry=retry_if_exception(
                                    lambda e: isinstance(e, EvictionBlocked)),
                                sleep=self.clock.sleep, reraise=True)
            try:
                retrying(self.evict, pod)
            except EvictionBlocked as exc:
                blocked[pod.label()] = f"{exc} ({attempts} attempts)"
            else:
                evicted.append(pod)
        return evicted, blocked
