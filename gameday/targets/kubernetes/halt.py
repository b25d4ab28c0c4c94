"""The fleet's safety lever held in Kubernetes: ``gameday halt`` writes the one ConfigMap
(:mod:`gameday.contract.halt`) in the agents' namespace, ``--release`` deletes it. The
agents read it themselves (:mod:`gameday.agent.halt_watch`), so the lever holds when the
host that threw it is gone. The orchestrator's ServiceAccount needs ``create`` on
ConfigMaps and ``get``/``update``/``delete`` on ``gameday-halt``
(``deploy/kubernetes/orchestrator-rbac.yaml``).
"""

from typing import Any

from gameday.contract.halt import CONFIGMAP, FleetLever, fleet_lever_data, parse_fleet_lever
from gameday.errors import TargetUnavailable

__all__ = ["FleetLeverObject", "fleet_lever_object"]


class FleetLeverObject:
    """The lever's ConfigMap in ``namespace``, through ``core`` (a ``CoreV1Api``)."""

    def __init__(self, core: Any, namespace: str) -> None:
        self.core = core
        self.namespace = namespace
        self.where = f"ConfigMap {namespace}/{CONFIGMAP}"

    def read(self) -> FleetLever:
        """The lever as the ConfigMap holds it (released when there is none)."""
        from kubernetes.client.exceptions import ApiException

        try:
            configmap = self.core.read_namespaced_config_map(CONFIGMAP, self.namespace)
        except ApiException as exc:
            if exc.status == 404:
                return FleetLever(engaged=False)
            raise self._failed("read", exc) from None
        except OSError as exc:
            raise TargetUnavailable(f"kubernetes: cannot read {self.where}: {exc}") from None
        return parse_fleet_lever(configmap.data)

    def engage(self, lever: FleetLever) -> FleetLever:
        """Write ``lever`` (engaged) unless the ConfigMap already holds an engaged one,
        which is kept (its first who, when and why); returns the lever it holds."""
        from kubernetes.client.exceptions import ApiException

        body = {"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": CONFIGMAP, "namespace": self.namespace,
                             "labels": {"app.kubernetes.io/part-of": "gameday"}},
                "data": fleet_lever_data(lever)}
        try:
            self.core.create_namespaced_config_map(self.namespace, body)
            return lever
        except ApiException as exc:
            if exc.status != 409:
                raise self._failed("create", exc) from None
        except OSError as exc:
            raise TargetUnavailable(f"kubernetes: cannot create {self.where}: {exc}") from None
        held = self.read()
        if held.engaged:
            return held
        try:
            self.core.replace_namespaced_config_map(CONFIGMAP, self.namespace, body)
        except ApiException as exc:
            raise self._failed("replace", exc) from None
        return lever

    def release(self) -> bool:
        """Delete the ConfigMap; True when there was one."""
        from kubernetes.client.exceptions import ApiException

        try:
            self.core.delete_namespaced_config_map(CONFIGMAP, self.namespace)
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise self._failed("delete", exc) from None
        except OSError as exc:
            raise TargetUnavailable(f"kubernetes: cannot delete {self.where}: {exc}") from None
        return True

    def _failed(self, what: str, exc: Any) -> TargetUnavailable:
        return TargetUnavailable(f"kubernetes: cannot {what} {self.where}: {exc.status} "
                                 f"{exc.reason}")


def fleet_lever_object(configuration: dict[str, Any] | None = None) -> FleetLeverObject:
    """The lever's ConfigMap of the cluster :mod:`gameday.kube.config`
    names (API and namespace from the configuration, else the environment)."""
    from kubernetes import client

    from gameday.kube.config import api_client, settings_from

    settings = settings_from(configuration or {})
    return FleetLeverObject(client.CoreV1Api(api_client(settings)), settings.namespace)
