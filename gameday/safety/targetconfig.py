"""Target configuration: what a run may touch on a cluster, and which agents exist.

A small YAML (or JSON) file, given with ``gameday run --target-config FILE`` (or
``$GAMEDAY_TARGET_CONFIG``, which ``chaos run`` under the gameday control also reads)::

    allow:
      nodes: [gpu-node-17, gpu-node-18]     # nothing outside may be faulted
      namespaces: [inference-canary]        # Kubernetes-level faults, likewise
    agents:                                 # extra agents `gameday cleanup --all-agents` asks
      - node: gpu-node-17
        url: https://10.0.0.17:9410
        token_file: /etc/gameday/agent-token
        ca: /etc/gameday/tls/ca.crt           # TLS (each falls back to $GAMEDAY_AGENT_CA,
        client_cert: /etc/gameday/tls/tls.crt #   $GAMEDAY_AGENT_CLIENT_CERT, ...)
        client_key: /etc/gameday/tls/tls.key
        server_name: gameday-agent.gameday-system.svc

Every key is optional; an absent ``allow.nodes`` allows every node. Errors name the
file, key path and line, and the run then injects nothing (exit 2). Tokens are read
from files or environment variables, never written in this file, and never logged.
"""

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gameday.errors import InvalidInput
from gameday.experiment.loader import read_document
from gameday.targets.agent_tls import AgentTLS, agent_tls_from

if TYPE_CHECKING:
    from gameday.wire.agent_client import AgentClient

ENV = "GAMEDAY_TARGET_CONFIG"

_TOP_KEYS = ("allow", "agents")
_ALLOW_KEYS = ("nodes", "namespaces")
_AGENT_KEYS = ("node", "url", "token_file", "token_env", "ca", "client_cert", "client_key",
               "server_name")
_TLS_KEYS = ("ca", "client_cert", "client_key", "server_name")
MAX_AGENTS = 10_000


@dataclass(frozen=True)
class AgentEndpoint:
    node: str
    url: str
    token_file: str | None = None
    token_env: str | None = None
    ca: str | None = None
    client_cert: str | None = None
    client_key: str | None = None
    server_name: str | None = None

    def tls(self) -> AgentTLS:
        """TLS to this agent: its own keys, each else the environment's."""
        return agent_tls_from({f"agent_{key}" if key != "server_name"
                               else "agent_tls_server_name": getattr(self, key)
                               for key in _TLS_KEYS})

    def client(self) -> "AgentClient":
        """A client for this agent (token read now, TLS as :meth:`tls` says)."""
        return self.tls().client(self.url, self.token())

    def token(self) -> str:
        """The agent's bearer token, read now from its file or environment variable."""
        if self.token_file:
            try:
                return Path(self.token_file).read_text(encoding="utf-8").strip()
            except OSError as exc:
                raise InvalidInput(f"cannot read token_file of agent {self.node}: "
                                   f"{exc.strerror}") from None
        value = os.environ.get(self.token_env or "GAMEDAY_AGENT_TOKEN", "")
        if not value:
            raise InvalidInput(f"agent {self.node}: no token (set token_file or token_env)")
        return value


@dataclass(frozen=True)
class TargetConfig:
    """The allowlists and extra agents of a target; the default allows everything."""

    allowed_nodes: frozenset[str] | None = None
    allowed_namespaces: frozenset[str] | None = None
    agents: tuple[AgentEndpoint, ...] = ()
    source: str = ""

    def node_allowed(self, node: str) -> bool:
        return self.allowed_nodes is None or node in self.allowed_nodes

    def namespace_allowed(self, namespace: str) -> bool:
        return self.allowed_namespaces is None or namespace in self.allowed_namespaces


def _strings(value: Any, path: str) -> frozenset[str]:
    if not isinstance(value, list):
        raise InvalidInput("must be a list of names", path=path)
    for position, item in enumerate(value):
        if not isinstance(item, str) or not item:
            raise InvalidInput("must be a non-empty string", path=f"{path}[{position}]")
    return frozenset(value)


def _unknown(mapping: Mapping[str, Any], known: tuple[str, ...], base: str) -> None:
    for key in mapping:
        if key not in known:
            where = f"{base}.{key}" if base else str(key)
            raise InvalidInput(f"unknown key (known: {', '.join(known)})", path=where)


def parse_target_config(document: Mapping[str, Any], source: str = "") -> TargetConfig:
    """Validate a parsed document; errors carry the key path."""
    _unknown(document, _TOP_KEYS, "")
    allow = document.get("allow") or {}
    if not isinstance(allow, Mapping):
        raise InvalidInput("must be a mapping", path="allow")
    _unknown(allow, _ALLOW_KEYS, "allow")
    nodes = _strings(allow["nodes"], "allow.nodes") if "nodes" in allow else None
    namespaces = (_strings(allow["namespaces"], "allow.namespaces")
                  if "namespaces" in allow else None)
    raw_agents = document.get("agents") or []
    if not isinstance(raw_agents, list):
        raise InvalidInput("must be a list", path="agents")
    if len(raw_agents) > MAX_AGENTS:
        raise InvalidInput(f"more than {MAX_AGENTS} agents", path="agents")
    agents = []
    for position, raw in enumerate(raw_agents):
        where = f"agents[{position}]"
        if not isinstance(raw, Mapping):
            raise InvalidInput("must be a mapping with node and url", path=where)
        _unknown(raw, _AGENT_KEYS, where)
        for key in ("node", "url"):
            if not isinstance(raw.get(key), str) or not raw[key]:
                raise InvalidInput("is required (a non-empty string)", path=f"{where}.{key}")
        if not str(raw["url"]).startswith(("http://", "https://")):
            raise InvalidInput("must be an http:// or https:// URL", path=f"{where}.url")
        for key in ("token_file", "token_env", *_TLS_KEYS):
            if raw.get(key) is not None and (not isinstance(raw[key], str) or not raw[key]):
                raise InvalidInput("must be a non-empty string", path=f"{where}.{key}")
        agents.append(AgentEndpoint(node=raw["node"], url=raw["url"],
                                    token_file=raw.get("token_file"),
                                    token_env=raw.get("token_env"),
                                    **{key: raw.get(key) for key in _TLS_KEYS}))
    return TargetConfig(allowed_nodes=nodes, allowed_namespaces=namespaces,
                        agents=tuple(agents), source=source)


def load_target_config(path: Path) -> TargetConfig:
    """Read and validate a target configuration file (one-line errors: file:line: path)."""
    document, lines = read_document(path)
    try:
        return parse_target_config(document, str(path))
    except InvalidInput as exc:
        text = str(exc)
        bare = text[len(exc.path) + 2:] if exc.path and text.startswith(f"{exc.path}: ") else text
        line = None
        probe = exc.path or ""
        while probe and line is None:
            line = lines.get(probe)
            cut = max(probe.rfind("."), probe.rfind("["))
            probe = probe[:cut] if cut > 0 else ""
        raise InvalidInput(bare, file=str(path), path=exc.path, line=line) from None


def from_environment(explicit: Path | None = None) -> TargetConfig:
    """The configuration named by ``explicit`` or ``$GAMEDAY_TARGET_CONFIG``; else allow-all."""
    path = explicit or (Path(os.environ[ENV]) if os.environ.get(ENV) else None)
    return load_target_config(path) if path is not None else TargetConfig()
