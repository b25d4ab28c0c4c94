"""The agent's Kubernetes reconciler: undo expired gameday marks on this agent's node.

Kubernetes-level faults (cordon, drain, taint) are applied by the orchestrator through
the API and marked on the node (``gameday.dev/revert-by`` + the inverse, see
:mod:`gameday.kube.marks`). While the orchestrator lives it keeps moving the deadline.
If it dies, nobody would uncordon the node, so every agent runs this loop for its own
node: every ``interval_s`` it reads the node (one ``GET``) and, for every mark whose
``revert_by`` has passed, applies the inverse and drops the mark, in one patch made
under the node's resourceVersion (a concurrent renewal by a live orchestrator wins,
and the mark is looked at again on the next round).

Each round also looks at the fleet's safety lever (:mod:`gameday.agent.halt_watch`)
once :meth:`NodeMarkReconciler.watch_lever` gave it the agent's lever.

Run it with ``gameday agent serve --reconcile-kubernetes --node $(NODE_NAME)`` (the
DaemonSet in ``deploy/kubernetes/`` does); the agent's ServiceAccount needs ``get`` and
``patch`` on nodes, and ``get`` on the ConfigMap ``gameday-halt`` of its namespace. API
settings as in :mod:`gameday.kube.config` (in a pod: in-cluster).
"""

import os
import threading
from typing import Any

import structlog

from gameday.agent.audit import AuditTrail
from gameday.agent.halt_watch import FleetLeverWatch
from gameday.agent.lever import Lever
from gameday.clock import SYSTEM_CLOCK, Clock
from gameday.errors import GamedayError, InvalidInput
from gameday.kube.marks import Mark
from gameday.kube.nodes import NodeEditor

__all__ = ["INTERVAL_ENV", "NodeMarkReconciler", "reconciler_for"]

#: Seconds between two looks at the node (default 5).
INTERVAL_ENV = "GAMEDAY_K8S_RECONCILE_S"

log = structlog.get_logger("gameday.agent.reconcile")


class NodeMarkReconciler:
    """Undoes the expired revert marks of one node, on demand or on a background thread."""

    def __init__(self, editor: NodeEditor, node: str, *, clock: Clock = SYSTEM_CLOCK,
                 interval_s: float = 5.0, namespace: str = "gameday-system") -> None:
        self.editor = editor
        self.namespace = namespace
        self.lever_watch: FleetLeverWatch | None = None
        self.node = node
        self.clock = clock
        self.interval_s = interval_s
        self.undone: list[Mark] = []
        self.last_error: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def reconcile_once(self) -> list[Mark]:
        """Undo every mark past its deadline now; returns the marks undone."""
        now = self.clock.now()
        undone = self.editor.undo(self.node, lambda mark: mark.revert_by <= now)
        for mark in undone:
            log.warning("k8s mark reverted", node=self.node, fault=mark.id, kind=mark.kind,
                        run=mark.run, inverse=dict(mark.inverse),
                        late_s=round(now - mark.revert_by, 3))
        self.undone += undone
        return undone

    def watch_lever(self, lever: Lever, audit: AuditTrail | None = None) -> FleetLeverWatch:
        """From now on every round also keeps ``lever`` in step with the fleet's lever."""
        self.lever_watch = FleetLeverWatch(self.editor.core, self.namespace, lever, audit)
        return self.lever_watch

    def start(self) -> "NodeMarkReconciler":
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, daemon=True,
                                            name=f"k8s-reconcile-{self.node}")
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    def _loop(self) -> None:
        while True:
            for look in (self._look_at_lever, self.reconcile_once):
                try:
                    look()
                    self.last_error = None
                except GamedayError as exc:  # the API is away: try again next round
                    if str(exc) != self.last_error:
                        log.error("k8s reconcile failed", node=self.node, error=str(exc))
                    self.last_error = str(exc)
            if self._stop.wait(self.interval_s):
                return

    def _look_at_lever(self) -> None:
        if self.lever_watch is not None:
            self.lever_watch.look_once()


def reconciler_for(node: str, configuration: dict[str, Any] | None = None, *,
                   interval_s: float | None = None) -> NodeMarkReconciler:
    """A reconciler for ``node`` with the API client of :mod:`gameday.kube.config`;
    its
    period is ``interval_s``, else ``$GAMEDAY_K8S_RECONCILE_S``, else 5 s."""
    from kubernetes import client

    from gameday.kube.config import api_client, settings_from

    if interval_s is None:
        raw = os.environ.get(INTERVAL_ENV, "5")
        try:
            interval_s = float(raw)
        except ValueError:
            raise InvalidInput(f"{INTERVAL_ENV}={raw!r} is not a number of seconds") from None
        if not 0.05 <= interval_s <= 3600:
            raise InvalidInput(f"{INTERVAL_ENV} must be within 0.05..3600 s, got {raw}")
    settings = settings_from(configuration or {})
    core = client.CoreV1Api(api_client(settings))
    return NodeMarkReconciler(NodeEditor(core), node, interval_s=interval_s,
                              namespace=settings.namespace)
