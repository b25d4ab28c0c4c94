"""The fleet's safety lever from the orchestrator: engage, release or read it on every
agent gameday knows at once, and refuse to start a run while it is engaged.

Every agent is asked concurrently (one thread per agent, up to :data:`MAX_PARALLEL`),
each answer (or its failure) is one :class:`AgentLever`, so an agent that did not answer
is listed as such, never dropped. The Kubernetes side (one ConfigMap the agents watch)
is :mod:`gameday.targets.kubernetes.halt`.
"""

import getpass
import os
import socket
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal

from gameday import paths
from gameday.errors import AgentError, GamedayError, InvalidInput
from gameday.safety import targetconfig

if TYPE_CHECKING:  # a run checks the lever of its target's agents: none without a target
    from gameday.wire.agent_client import AgentClient

__all__ = ["MAX_PARALLEL", "AgentLever", "FleetHalted", "each_agent", "halted_lines",
           "refuse_if_halted", "throw", "uses_kubernetes", "who"]

#: Agents asked at once.
MAX_PARALLEL: Final = 128

Action = Literal["engage", "release", "status"]


class FleetHalted(InvalidInput):
    """A run would start while the safety lever is engaged on one of its agents: nothing
    is injected (exit 2)."""


@dataclass(frozen=True)
class AgentLever:
    """One agent's lever after an engage, release or status: ``engaged`` is None when the
    agent did not answer (``error`` says why); ``active`` the faults it still holds (after
    an engage)."""

    agent: str
    engaged: bool | None
    line: str
    state: Mapping[str, Any] | None = None
    error: str | None = None
    active: int | None = None
    follows_object: bool = False  # released with the cluster's ConfigMap, on its next round

    def to_json(self) -> dict[str, Any]:
        return {"agent": self.agent, "engaged": self.engaged, "line": self.line,
                "lever": dict(self.state) if self.state is not None else None,
                "error": self.error, "active": self.active,
                "follows_object": self.follows_object}


def _line(agent: str, state: Mapping[str, Any]) -> str:
    if not state.get("engaged"):
        return f"{agent}: released"
    return (f"{agent}: halted by {state.get('engaged_by') or 'unknown'} "
            f"({state.get('source', 'api')}): {state.get('reason') or 'no reason given'}")


def _one(agent: str, client: "AgentClient", action: Action, reason: str) -> AgentLever:
    from gameday.wire.agent_client import AgentHalted

    try:
        if action == "engage":
            state = client.halt(reason)
        elif action == "release":
            state = client.release_halt()
        else:
            state = client.halt_state()
    except AgentHalted as exc:  # a release the fleet's Kubernetes object refuses
        if exc.halt.get("source") == "kubernetes":
            return AgentLever(agent, True, f"{agent}: engaged from the cluster's ConfigMap; "
                              "released with it on its next reconcile round", exc.halt,
                              follows_object=True)
        return AgentLever(agent, True, f"{agent}: {exc}", exc.halt, str(exc))
    except AgentError as exc:
        if exc.status == 404:
            why = "answered 404: an agent without the safety lever (upgrade it)"
        else:
            why = f"did not answer: {exc}" if exc.status is None else str(exc)
        return AgentLever(agent, None, f"{agent}: {why}", None, why)
    active = state.get("active")
    return AgentLever(agent, bool(state.get("engaged")), _line(agent, state), state,
                      active=active if isinstance(active, int) else None)


def each_agent(clients: Mapping[str, "AgentClient"], action: Action, reason: str = "", *,
               parallel: int = MAX_PARALLEL) -> list[AgentLever]:
    """``action`` on every agent of ``clients`` (name or URL -> client) at once; one
    result per agent, by name."""
    if not clients:
        return []
    items = sorted(clients.items())
    call: Callable[[tuple[str, AgentClient]], AgentLever] = \
        lambda item: _one(item[0], item[1], action, reason)  # noqa: E731
    with ThreadPoolExecutor(max_workers=max(1, min(parallel, len(items))),
                            thread_name_prefix="halt") as pool:
        return list(pool.map(call, items))


def halted_lines(clients: Mapping[str, "AgentClient"]) -> list[str]:
    """One line per agent of ``clients`` whose lever is engaged (agents that do not
    answer, or have no lever, are left to the run's own checks)."""
    return [lever.line for lever in each_agent(clients, "status") if lever.engaged]


def refuse_if_halted(clients: Mapping[str, "AgentClient"]) -> None:
    """:class:`FleetHalted` naming the lever when it is engaged on any of ``clients``."""
    halted = halted_lines(clients)
    if halted:
        more = f" (and {len(halted) - 1} more agent(s))" if len(halted) > 1 else ""
        raise FleetHalted(f"the safety lever is engaged: {halted[0]}{more}; nothing "
                          "injected; `gameday halt --release` releases it")


def who() -> str:
    """Who throws the lever from this machine: ``user@host``."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    return f"{user}@{socket.gethostname()}"


def uses_kubernetes(asked: bool) -> bool:
    """Whether the cluster's lever ConfigMap is thrown too: asked, or
    ``$GAMEDAY_K8S_API_URL`` set."""
    return asked or bool(os.environ.get("GAMEDAY_K8S_API_URL"))


def throw(action: Action, reason: str, target_config: Path | None = None, *,
          kubernetes: bool = False) -> dict[str, Any]:
    """``action`` on every known agent (and the cluster's ConfigMap); the command's JSON
    document (``lines`` is its text). :class:`InvalidInput` when no agent is known."""
    from gameday.safety.cleanup import known_agents

    config = targetconfig.from_environment(target_config)
    clients, problems = known_agents(paths.lab_dir(), config)
    if not clients and not kubernetes:
        raise InvalidInput("no agent known: start the lab, give --target-config FILE, set "
                           "GAMEDAY_AGENT_URL and GAMEDAY_AGENT_TOKEN, or pass --kubernetes"
                           + (f" ({'; '.join(problems)})" if problems else ""))
    started = time.monotonic()
    cluster = _kubernetes(action, reason) if kubernetes else None  # first: the one object
    notes: list[str] = []
    if kubernetes:
        found, note = _cluster_agents()
        for client in found.values():
            clients.setdefault(client.url, client)
        notes += [note] if note else []
    levers = each_agent(clients, action, reason)
    wanted = {"engage": True, "release": False, "status": None}[action]
    failed = [lever for lever in levers if lever.engaged is None
              or (wanted is not None and lever.engaged is not wanted
                  and not lever.follows_object)]
    lines = [lever.line for lever in levers] + [f"not reached: {p}" for p in problems]
    if cluster is not None:
        lines.append(cluster["line"])
    lines += notes
    bad = bool(failed or problems or (cluster is not None and cluster["error"]))
    verb = {"engage": "engaged on", "release": "released on", "status": "read from"}[action]
    answered = len(levers) - sum(1 for lever in levers if lever.engaged is None)
    lines.append(f"safety lever {verb} {answered} of {len(levers)} agent(s) in "
                 f"{time.monotonic() - started:.2f} s"
                 + (f"; {len(failed)} did not answer or refused" if failed else ""))
    return {"action": action, "reason": reason if action == "engage" else None,
            "agents": [lever.to_json() for lever in levers], "kubernetes": cluster,
            "problems": problems, "lines": lines, "exit_code": 1 if bad else 0}


def _cluster_agents() -> "tuple[dict[str, AgentClient], str | None]":
    """The agents the cluster's API lists (as ``--target kubernetes`` finds them), asked
    directly so that they act at once; when none can be found, a note: they follow the
    ConfigMap on their next reconcile round anyway."""
    from gameday.targets.kubernetes.target import kubernetes_target

    try:
        return dict(kubernetes_target({}).agents), None
    except GamedayError as exc:
        return {}, (f"kubernetes agents not asked directly ({exc}); each follows the "
                    "ConfigMap on its next reconcile round")


def _kubernetes(action: Action, reason: str) -> dict[str, Any]:
    """The cluster's lever ConfigMap after ``action``: engaged, line, error."""
    from gameday.contract.halt import FleetLever
    from gameday.targets.kubernetes.halt import fleet_lever_object

    try:
        lever_object = fleet_lever_object()
        if action == "engage":
            held = lever_object.engage(FleetLever(True, reason, who(), time.time()))
        elif action == "release":
            lever_object.release()
            held = FleetLever(False)
        else:
            held = lever_object.read()
    except GamedayError as exc:
        return {"engaged": None, "line": f"kubernetes: {exc}", "error": str(exc)}
    state = (f"halted by {held.engaged_by or 'unknown'}: {held.reason or 'no reason given'}"
             if held.engaged else "released")
    return {"engaged": held.engaged, "object": lever_object.where, "reason": held.reason,
            "engaged_by": held.engaged_by, "engaged_at": held.engaged_at,
            "line": f"kubernetes {lever_object.where}: {state} (agents follow it on their "
                    "next reconcile round)", "error": None}
