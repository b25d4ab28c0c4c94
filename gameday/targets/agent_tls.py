"""How the orchestrator reaches agents that speak TLS (mutual TLS with a client certificate).

Settings come from the run's configuration (``--var KEY=VALUE``, the experiment's
``configuration``), else from the environment, which ``--agent-ca``/``--agent-client-cert``/
``--agent-client-key`` of ``gameday run/play/gate/cleanup`` set:

=========================  ==================================  ============================
configuration key          environment variable                what
=========================  ==================================  ============================
``agent_ca``               ``GAMEDAY_AGENT_CA``                the agents' CA bundle (PEM)
``agent_client_cert``      ``GAMEDAY_AGENT_CLIENT_CERT``       client certificate (mTLS)
``agent_client_key``       ``GAMEDAY_AGENT_CLIENT_KEY``        its private key
``agent_tls_server_name``  ``GAMEDAY_AGENT_TLS_SERVER_NAME``   name the agents' certs carry
=========================  ==================================  ============================

TLS is *configured* when a CA or a client certificate is given; an ``https://`` agent URL
without either is checked against the system's CAs.
"""

import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from gameday.wire.tls import client_context

if TYPE_CHECKING:
    from gameday.wire.agent_client import AgentClient

__all__ = ["ENVIRONMENT", "AgentTLS", "add_arguments", "agent_tls_from", "apply_arguments"]

#: Configuration key -> environment variable, for each setting.
ENVIRONMENT: Final = {
    "agent_ca": "GAMEDAY_AGENT_CA",
    "agent_client_cert": "GAMEDAY_AGENT_CLIENT_CERT",
    "agent_client_key": "GAMEDAY_AGENT_CLIENT_KEY",
    "agent_tls_server_name": "GAMEDAY_AGENT_TLS_SERVER_NAME",
}


@dataclass(frozen=True)
class AgentTLS:
    """Files and name for TLS to the agents (all optional; see the module doc)."""

    ca: str = ""
    client_cert: str = ""
    client_key: str = ""
    server_name: str = ""

    @property
    def configured(self) -> bool:
        """Whether a CA or a client certificate was given (agent URLs are then https)."""
        return bool(self.ca or self.client_cert)

    def context(self) -> ssl.SSLContext | None:
        """The client context (TLS 1.3; :class:`gameday.errors.InvalidInput` when a file
        does not load), None when nothing is configured."""
        if not (self.configured or self.client_key):
            return None
        return client_context(Path(self.ca) if self.ca else None,
                              Path(self.client_cert) if self.client_cert else None,
                              Path(self.client_key) if self.client_key else None)

    def client(self, url: str, token: str, *, timeout_s: float = 5.0,
               default_server_name: str = "") -> "AgentClient":
        """An :class:`AgentClient` for ``url`` with this TLS, checking the agent's
        certificate for :attr:`server_name`, else ``default_server_name``, else the URL's
        host. (The client's module is imported here: every command defines these
        options, few reach an agent.)"""
        from gameday.wire.agent_client import AgentClient

        return AgentClient(url, token, timeout_s, tls=self.context(),
                           server_name=self.server_name or default_server_name or None)


def agent_tls_from(configuration: Mapping[str, Any] | None = None,
                   environ: Mapping[str, str] | None = None) -> AgentTLS:
    """The settings from ``configuration``, else ``environ`` (default: the process's)."""
    env = os.environ if environ is None else environ
    configuration = configuration or {}
    values = {}
    for key, variable in ENVIRONMENT.items():
        raw = configuration.get(key)
        values[key] = str(raw) if raw not in (None, "") else env.get(variable, "")
    return AgentTLS(ca=values["agent_ca"], client_cert=values["agent_client_cert"],
                    client_key=values["agent_client_key"],
                    server_name=values["agent_tls_server_name"])


def add_arguments(parser: Any) -> None:
    """``--agent-ca``, ``--agent-client-cert``, ``--agent-client-key`` on a command."""
    parser.add_argument("--agent-ca", metavar="FILE",
                        help="CA bundle of the agents' certificates ($GAMEDAY_AGENT_CA)")
    parser.add_argument("--agent-client-cert", metavar="FILE",
                        help="client certificate for the agents' mutual TLS "
                             "($GAMEDAY_AGENT_CLIENT_CERT)")
    parser.add_argument("--agent-client-key", metavar="FILE",
                        help="its private key ($GAMEDAY_AGENT_CLIENT_KEY)")


def apply_arguments(args: Any) -> None:
    """Put the options :func:`add_arguments` defined into the environment, where every
    target (and the runs a playbook starts) reads them."""
    for option in ("agent_ca", "agent_client_cert", "agent_client_key"):
        value, variable = getattr(args, option, None), ENVIRONMENT[option]
        if value:
            os.environ[variable] = str(Path(value).absolute())
