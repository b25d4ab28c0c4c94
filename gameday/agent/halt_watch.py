"""The agent's side of the fleet's safety lever on Kubernetes: it reads the lever's one
ConfigMap (:mod:`gameday.contract.halt`) in the agents' namespace and engages or
releases this agent's lever (:mod:`gameday.agent.lever`) to match.

An engaged ConfigMap engages the lever (``source: kubernetes``, by
``kubernetes:<namespace>/gameday-halt (<who wrote it>)``), which reverts every fault the
agent holds at once; a deleted or released ConfigMap releases a lever it engaged (one
engaged through the agent's own API stays). When the API cannot be read the lever stays
as it is: an agent cut off from the API while halted stays halted, and its leases still
end every fault an orchestrator no longer renews. Each change is recorded in the agent's
audit trail (method ``WATCH``). The reconciler (:mod:`gameday.agent.reconcile`) runs a
look on every round.
"""

from typing import Any

import structlog

from gameday.agent.audit import AuditTrail, shown_of
from gameday.agent.lever import Lever
from gameday.contract.halt import CONFIGMAP, FleetLever, parse_fleet_lever
from gameday.errors import AgentError

__all__ = ["FleetLeverWatch"]

log = structlog.get_logger("gameday.agent.halt_watch")


class FleetLeverWatch:
    """Keeps ``lever`` in step with ConfigMap ``namespace``/:data:`CONFIGMAP`, read through
    ``core`` (a ``kubernetes.client.CoreV1Api``)."""

    def __init__(self, core: Any, namespace: str, lever: Lever,
                 audit: AuditTrail | None = None) -> None:
        self.core = core
        self.namespace = namespace
        self.lever = lever
        self.audit = audit
        self.where = f"kubernetes:{namespace}/{CONFIGMAP}"

    def read(self) -> FleetLever:
        """What the ConfigMap says now (released when it does not exist);
        :class:`AgentError` when the API cannot tell."""
        from kubernetes.client.exceptions import ApiException

        try:
            configmap = self.core.read_namespaced_config_map(CONFIGMAP, self.namespace)
        except ApiException as exc:
            if exc.status == 404:
                return FleetLever(engaged=False)
            raise AgentError(f"read ConfigMap {self.namespace}/{CONFIGMAP}: {exc.status} "
                             f"{exc.reason}") from None
        except OSError as exc:  # urllib3's connection errors are OSErrors
            raise AgentError(f"read ConfigMap {self.namespace}/{CONFIGMAP}: {exc}") from None
        return parse_fleet_lever(configmap.data)

    def look_once(self) -> bool:
        """Read the ConfigMap and engage or release the lever to match; True when the
        lever changed."""
        fleet = self.read()
        state = self.lever.state
        if fleet.engaged and (not state.engaged or state.source != "kubernetes"):
            by = f"{self.where} ({fleet.engaged_by or 'unknown'})"
            self.lever.engage(fleet.reason, by, source="kubernetes")
            self._record("engaged", by, fleet.reason)
            return True
        if not fleet.engaged and state.engaged and state.source == "kubernetes":
            self.lever.release(self.where, source="kubernetes")
            self._record("released", self.where, "")
            return True
        return False

    def _record(self, what: str, by: str, reason: str) -> None:
        log.warning(f"fleet lever {what}", node=self.lever.node, by=by, reason=reason)
        if self.audit is not None:
            try:
                self.audit.record(source="kubernetes", identity=by, token=None,
                                  method="WATCH", path=f"/v1/halt ({what})", status=200,
                                  shown=shown_of({"reason": reason}) if reason else None)
            except OSError as exc:
                log.error("audit failed", error=str(exc))
