"""Targets: where faults land and what they land on.

A target is discovered, never imported: the lab through its ``lab.json`` discovery
document, a single host through an agent URL and token. Selectors name GPUs the way
an operator thinks of them (``{holding_shard: 0}``, ``{node: node-0, index: 2}``,
``{uuid: GPU-…}``) and resolve to concrete :class:`GpuRef` values before anything is
injected.
"""

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gameday.bounded import read_json
from gameday.contract.gpus import gpu_label
from gameday.errors import AgentError, InvalidInput, TargetUnavailable
from gameday.httpclient import get_json
from gameday.targets.agent_tls import agent_tls_from

if TYPE_CHECKING:
    from gameday.wire.agent_client import AgentClient


@dataclass(frozen=True)
class GpuRef:
    """One concrete GPU: the node (and its agent) and the index on that node."""

    node: str
    index: int
    uuid: str = ""
    nvlink_domain: str = ""

    def label(self) -> str:
        return gpu_label(self.node, self.index)

    def to_json(self) -> dict[str, Any]:
        return {"node": self.node, "index": self.index, "uuid": self.uuid,
                "nvlink_domain": self.nvlink_domain}


@dataclass
class Target:
    """A resolved target: its agents and the endpoints the verifiers read."""

    kind: str
    agents: dict[str, "AgentClient"] = field(default_factory=dict)
    service_url: str | None = None
    prometheus_url: str | None = None
    placement_url: str | None = None
    source: str = ""

    def configuration(self) -> dict[str, str]:
        """Values offered to experiments as ``${...}`` configuration."""
        values = {"service_url": self.service_url, "prometheus_url": self.prometheus_url,
                  "placement_url": self.placement_url}
        return {key: value for key, value in values.items() if value}

    def agent(self, node: str) -> "AgentClient":
        try:
            return self.agents[node]
        except KeyError:
            raise TargetUnavailable(
                f"no agent for node {node!r} in target {self.kind} "
                f"(nodes: {', '.join(sorted(self.agents)) or 'none'})") from None

    def placement(self) -> dict[str, Any]:
        if not self.placement_url:
            raise TargetUnavailable(f"target {self.kind} has no placement source")
        data = get_json(self.placement_url)
        if not isinstance(data, dict):
            raise TargetUnavailable(f"placement at {self.placement_url} is not a JSON object")
        return data

    def lab_processes(self) -> list[dict[str, Any]]:
        """The lab's processes (``{"name", "role", "pid", ...}``, from its discovery
        document, read now); :class:`TargetUnavailable` when no lab runs there."""
        processes = read_lab_document(Path(self.source)).get("processes", [])
        return [p for p in processes if isinstance(p, dict)] if isinstance(processes, list) else []

    def gpus(self) -> list[GpuRef]:
        """Every GPU of every agent, from the agents' inventories."""
        found: list[GpuRef] = []
        for node, client in sorted(self.agents.items()):
            for gpu in client.inventory().get("gpus", []):
                found.append(GpuRef(node=node, index=int(gpu["index"]),
                                    uuid=str(gpu.get("uuid", "")),
                                    nvlink_domain=str(gpu.get("nvlink_domain", node))))
        return found

    def resolve_gpus(self, selector: Mapping[str, Any], *, where: str = "gpu") -> list[GpuRef]:
        """Turn a GPU selector into concrete GPUs; a one-line error if it matches none."""
        gpus = self.gpus()
        if "holding_shard" in selector:
            shard = selector["holding_shard"]
            placed = [s for s in self.placement().get("shards", []) if s.get("shard") == shard]
            if not placed:
                raise InvalidInput(f"no shard {shard!r} in the placement", path=where)
            wanted = {(str(s["node"]), int(s["gpu"])) for s in placed}
            matches = [g for g in gpus if (g.node, g.index) in wanted]
        elif "uuid" in selector:
            matches = [g for g in gpus if g.uuid == selector["uuid"]]
        elif "node" in selector:
            index = selector.get("index")
            matches = [g for g in gpus if g.node == selector["node"]
                       and (index is None or g.index == index)]
        else:
            raise InvalidInput("a GPU selector needs one of holding_shard, uuid, node[+index]",
                               path=where)
        if not matches:
            raise InvalidInput(f"selector {dict(selector)} matches no GPU on target {self.kind}",
                               path=where)
        return matches


def read_lab_document(lab_dir: Path) -> dict[str, Any]:
    """Read the lab's discovery document (``lab.json``), or say that no lab runs."""
    path = lab_dir / "lab.json"
    if not path.exists():
        raise TargetUnavailable(f"no lab runs in {lab_dir} (start one with `gameday lab up`)")
    try:
        _, document = read_json(path, "lab discovery document", limit=1_000_000)
    except InvalidInput as exc:
        raise TargetUnavailable(str(exc)) from None
    if not isinstance(document, dict) or document.get("status") != "ready":
        raise TargetUnavailable(f"the lab in {lab_dir} is not ready")
    return document


def lab_target(lab_dir: Path) -> Target:
    """A target for the embedded lab, discovered through its ``lab.json``."""
    from gameday.wire.agent_client import AgentClient  # a run without a target needs none

    document = read_lab_document(lab_dir)
    token = Path(document["token_file"]).read_text(encoding="utf-8").strip()
    agents = {node["name"]: AgentClient(node["agent_url"], token)
              for node in document.get("nodes", [])}
    return Target(kind="lab", agents=agents, service_url=document.get("service_url"),
                  prometheus_url=document.get("prometheus_url"),
                  placement_url=document.get("placement_url"), source=str(lab_dir))


def target_settings(experiment: Mapping[str, Any], variables: Mapping[str, Any]
                    ) -> dict[str, Any]:
    """The settings a target is opened with, as a Chaos Toolkit user expects: the
    experiment's ``secrets`` (every scope's keys, resolved as the toolkit resolves them),
    under its ``configuration`` (``{type: env, key}`` entries resolved), under
    ``variables`` (``--var``). :class:`InvalidInput` names an entry that does not
    resolve (an environment variable that is not set, without a default)."""
    from chaoslib.configuration import load_configuration
    from chaoslib.exceptions import ChaosException
    from chaoslib.secret import load_secrets

    settings: dict[str, Any] = {}
    try:
        secrets = load_secrets(dict(experiment.get("secrets") or {}))
        for scope in secrets.values():
            if isinstance(scope, Mapping):
                settings.update(scope)
        settings.update(load_configuration(dict(experiment.get("configuration") or {})))
    except ChaosException as exc:
        raise InvalidInput(f"experiment configuration/secrets: {exc}") from None
    settings.update(variables)
    return settings


def missing_setting(target: str, keys: Sequence[tuple[str, str]]) -> str:
    """The error line for target settings ``keys`` (``(key, environment variable)``)
    that no place set, naming every place a setting may come from."""
    names = " and ".join(key for key, _ in keys)
    envs = " / ".join(env for _, env in keys)
    return (f"target {target} needs {names}: set {'each' if len(keys) > 1 else 'it'} with "
            f"--var KEY=VALUE, in the experiment's configuration (a value or {{type: env, "
            f"key: NAME}}), in its secrets (any scope), or in the environment as {envs}")


def host_target(configuration: Mapping[str, Any]) -> Target:
    """A single host running ``gameday agent serve``: URL and token from the settings
    (:func:`target_settings`), else ``GAMEDAY_AGENT_URL`` / ``GAMEDAY_AGENT_TOKEN``; TLS
    from :func:`gameday.targets.agent_tls.agent_tls_from` (``agent_ca``,
    ``agent_client_cert``, ``agent_client_key``, ``agent_tls_server_name``)."""
    url = configuration.get("agent_url") or os.environ.get("GAMEDAY_AGENT_URL")
    token = configuration.get("agent_token") or os.environ.get("GAMEDAY_AGENT_TOKEN")
    if not url or not token:
        keys = [(key, env) for key, env, value in (
            ("agent_url", "GAMEDAY_AGENT_URL", url),
            ("agent_token", "GAMEDAY_AGENT_TOKEN", token)) if not value]
        raise TargetUnavailable(missing_setting("host", keys))
    client = agent_tls_from(configuration).client(str(url), str(token))
    try:
        node = str(client.health().get("node", "host"))
    except AgentError as exc:  # unreachable, or refused in the TLS handshake
        raise TargetUnavailable(f"target host: {exc}") from None
    return Target(kind="host", agents={node: client},
                  service_url=configuration.get("service_url"),
                  prometheus_url=configuration.get("prometheus_url"),
                  placement_url=configuration.get("placement_url"), source=str(url))


def run_configuration(experiment: Mapping[str, Any], target: Target | None,
                      variables: Mapping[str, str]) -> dict[str, Any]:
    """A run's configuration: the experiment's, what the target offers, then ``--var``."""
    configuration = dict(experiment.get("configuration") or {})
    for key, value in (target.configuration() if target else {}).items():
        configuration.setdefault(key, value)
    configuration.update(variables)
    return configuration


def loaded_configuration(experiment: Mapping[str, Any], target: Target | None,
                         variables: Mapping[str, str]) -> dict[str, Any]:
    """The run's configuration as the toolkit loads it (``env`` entries read), what a
    ``${name}`` in an argument is substituted by."""
    from chaoslib.configuration import load_configuration

    raw = run_configuration(experiment, target, variables)
    try:
        return dict(load_configuration(raw))
    except Exception:  # an env-typed value without its variable: plan with what there is
        return {k: v for k, v in raw.items() if not isinstance(v, Mapping)}
