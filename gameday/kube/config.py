"""How gameday reaches a Kubernetes cluster and its agents: settings and the API client.

Settings come from the run's configuration (``--var KEY=VALUE`` or the experiment's
``configuration``), else from the environment, else from the defaults that match
``deploy/kubernetes/``:

=====================  ==============================  =================================
configuration key      environment variable            default
=====================  ==============================  =================================
``k8s_namespace``      ``GAMEDAY_K8S_NAMESPACE``       ``gameday-system``
``k8s_agent_selector`` ``GAMEDAY_K8S_AGENT_SELECTOR``  ``app.kubernetes.io/name=gameday-agent``
``k8s_agent_port``     ``GAMEDAY_K8S_AGENT_PORT``      the pod's ``agent`` port, else 9410
``k8s_token_secret``   ``GAMEDAY_K8S_TOKEN_SECRET``    ``gameday-agent-token`` (key ``token``)
``agent_token``        ``GAMEDAY_AGENT_TOKEN``         (read from the Secret when unset)
``kubeconfig``         ``KUBECONFIG``                  ``~/.kube/config``, else in-cluster
``k8s_context``        ``GAMEDAY_K8S_CONTEXT``         the kubeconfig's current context
``k8s_api_url``        ``GAMEDAY_K8S_API_URL``         (with ``k8s_api_token``: no kubeconfig)
=====================  ==============================  =================================

The API client is the official ``kubernetes`` client, configured from a kubeconfig,
from the pod's service account (in-cluster), or from an explicit URL and bearer token.
"""

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gameday.errors import InvalidInput, TargetUnavailable, first_line

__all__ = ["DEFAULT_AGENT_PORT", "KubeSettings", "api_client", "settings_from"]

DEFAULT_AGENT_PORT = 9410

_KEYS = {
    "namespace": ("k8s_namespace", "GAMEDAY_K8S_NAMESPACE", "gameday-system"),
    "agent_selector": ("k8s_agent_selector", "GAMEDAY_K8S_AGENT_SELECTOR",
                       "app.kubernetes.io/name=gameday-agent"),
    "agent_port": ("k8s_agent_port", "GAMEDAY_K8S_AGENT_PORT", ""),
    "token_secret": ("k8s_token_secret", "GAMEDAY_K8S_TOKEN_SECRET", "gameday-agent-token"),
    "agent_token": ("agent_token", "GAMEDAY_AGENT_TOKEN", ""),
    "kubeconfig": ("kubeconfig", "KUBECONFIG", ""),
    "context": ("k8s_context", "GAMEDAY_K8S_CONTEXT", ""),
    "api_url": ("k8s_api_url", "GAMEDAY_K8S_API_URL", ""),
    "api_token": ("k8s_api_token", "GAMEDAY_K8S_API_TOKEN", ""),
}


@dataclass(frozen=True)
class KubeSettings:
    """Where the agents are and how to reach the API (see the module docstring)."""

    namespace: str = "gameday-system"
    agent_selector: str = "app.kubernetes.io/name=gameday-agent"
    agent_port: int | None = None
    token_secret: str = "gameday-agent-token"
    agent_token: str = ""
    kubeconfig: str = ""
    context: str = ""
    api_url: str = ""
    api_token: str = ""

    def __repr__(self) -> str:  # tokens never appear in logs or errors
        return (f"KubeSettings(namespace={self.namespace!r}, "
                f"agent_selector={self.agent_selector!r}, api_url={self.api_url!r})")


def settings_from(configuration: Mapping[str, Any],
                  environ: Mapping[str, str] | None = None) -> KubeSettings:
    """Settings from configuration, then environment, then defaults."""
    env = os.environ if environ is None else environ
    values: dict[str, str] = {}
    for name, (key, variable, default) in _KEYS.items():
        raw = configuration.get(key)
        values[name] = str(raw) if raw not in (None, "") else env.get(variable, default)
    port: int | None = None
    if values["agent_port"]:
        if not values["agent_port"].isdigit() or not 0 < int(values["agent_port"]) < 65536:
            raise InvalidInput(f"must be a TCP port, got {values['agent_port']!r}",
                               path="configuration.k8s_agent_port")
        port = int(values["agent_port"])
    return KubeSettings(**{**values, "agent_port": port})  # type: ignore[arg-type]


def api_client(settings: KubeSettings) -> Any:
    """A ``kubernetes.client.ApiClient`` for the cluster the settings name.

    Order: an explicit ``api_url`` (+ ``api_token``); a kubeconfig (the given file, else
    ``~/.kube/config`` when it exists); the in-cluster service account. One-line
    :class:`TargetUnavailable` when none works.
    """
    from kubernetes import client, config
    from kubernetes.config.config_exception import ConfigException

    if settings.api_url:
        configuration = client.Configuration()
        configuration.host = settings.api_url.rstrip("/")
        if settings.api_token:
            configuration.api_key = {"authorization": settings.api_token}
            configuration.api_key_prefix = {"authorization": "Bearer"}
        return client.ApiClient(configuration)
    kubeconfig = settings.kubeconfig or str(Path("~/.kube/config").expanduser())
    try:
        if settings.kubeconfig or Path(kubeconfig).exists():
            return config.new_client_from_config(  # type: ignore[no-untyped-call]
                config_file=kubeconfig, context=settings.context or None,
                persist_config=False)
        configuration = client.Configuration()
        config.load_incluster_config(  # type: ignore[no-untyped-call]
            client_configuration=configuration)
        return client.ApiClient(configuration)
    except (ConfigException, OSError, KeyError, ValueError) as exc:
        where = f"kubeconfig {kubeconfig}" if settings.kubeconfig or Path(kubeconfig).exists() \
            else "the in-cluster service account"
        raise TargetUnavailable(f"target kubernetes: cannot configure the API client from "
                                f"{where}: {first_line(exc)}") from None
