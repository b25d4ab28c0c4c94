"""Process fault actions (Chaos Toolkit activities): kill a process, or pause it.

``process`` selects it. Lab: ``{shard: N}`` (the shard's process, from the placement)
or ``{role: router}`` (a lab process by role or name, from ``lab.json``: router,
controller, trainer, node-0...). Host: ``{pid: N}``, ``{name: COMM}`` (the command
name, like ``pgrep -x``) or ``{cmdline: REGEX}`` (like ``pgrep -f``), narrowed or
selected by ``env: {RANK: "1", TORCHELASTIC_RUN_ID: ID}`` (the process's environment),
``parent: {name|cmdline|pid: ...}`` (children of that process, e.g. a ``torchrun``
agent's workers) and ``cgroup: REGEX`` (``/proc/PID/cgroup``). Kubernetes:
``pod: {namespace, labels | label_selector | name, container}``, the processes of that
container of that pod, on its node (:mod:`gameday.targets.kubernetes.containers`),
narrowed by name, cmdline, env or parent if given. The agent refuses when more than
``max_processes`` match. ``node`` names the agent when the target has several. Every
action checks its arguments, checks ``blast_radius.max_nodes``, and
signals through the node's agent under a lease; the ledger records it.
"""

from typing import Any

from gameday import activity
from gameday.activity import KubernetesTarget, Target
from gameday.errors import AgentError, InvalidInput
from gameday.kinds import KindParams, KindSpec
from gameday.kinds.process import PROCESS_KILL, PROCESS_PAUSE

__all__ = ["kill", "pause", "resume", "revert"]



def kill(process: dict[str, Any], max_processes: int = 1,
         lease_s: float | None = None) -> dict[str, Any]:
    """SIGKILL the selected process. Nothing can revert it: whatever supervises it (the
    lab's controller for a shard, the supervisor for the router) must restart it.

    Returns ``{"faults": [{"id", "node", "target", "injected_at", "applied_at",
    "expires_at", "details"}]}``; ``details.processes`` lists the pids signalled.
    """
    params = activity.validated(PROCESS_KILL, {"max_processes": max_processes})
    return _inject(PROCESS_KILL, "kill", process, params, lease_s)


def pause(process: dict[str, Any], duration_s: float | None = None, max_processes: int = 1,
          lease_s: float | None = None) -> dict[str, Any]:
    """SIGSTOP the selected process; SIGCONT it after ``duration_s`` (if given), on
    revert, or when the lease lapses. A paused server keeps its sockets open, so its
    clients hang rather than fail fast."""
    params = activity.validated(PROCESS_PAUSE, {"max_processes": max_processes,
                                                "duration_s": duration_s})
    return _inject(PROCESS_PAUSE, "pause", process, params, lease_s)


def resume() -> dict[str, Any]:
    """Continue every process this run paused (revert only the ``process.pause`` faults)."""
    with activity.failing():
        return {"reverted": activity.revert_kinds("process.pause")}


def revert() -> dict[str, Any]:
    """Revert every fault this run applied (idempotent); fails if any could not be reverted."""
    return activity.revert_all()



def _pick_node(target: Target, node: Any) -> str:
    if node is not None:
        if node not in target.agents:
            raise InvalidInput(f"no node {node!r} in target {target.kind} (nodes: "
                               f"{', '.join(sorted(target.agents))})", path="process.node")
        return str(node)
    if not target.agents:
        raise InvalidInput(f"target {target.kind} has no agent", path="process")
    return sorted(target.agents)[0]


def resolve_process(selector: Any) -> tuple[str, dict[str, Any]]:
    """The node whose agent signals, and the agent-side target (with the selector's
    ``pick``, which the agent applies to what it matches)."""
    chosen = activity.check_process_selector(selector)
    pick = chosen.pop("pick", None)
    node, agent_target = _resolve(chosen)
    return node, agent_target if pick is None else {**agent_target, "pick": pick}


def _resolve(chosen: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    filters = {key: chosen[key] for key in activity.PROCESS_FILTERS if key in chosen}
    which = [key for key in activity.PROCESS_KEYS
             if key not in ("node", *activity.PROCESS_FILTERS) and key in chosen]
    target = activity.current().require_target()
    if "pod" in chosen:
        return _in_container(target, chosen, which, filters)
    if filters:
        return _pick_node(target, chosen.get("node")), _host_filters(chosen, which, filters)
    key = which[0]  # (exactly one: check_process_selector)
    if key == "shard":
        placed = [s for s in target.placement().get("shards", [])
                  if s.get("shard") == chosen["shard"]]
        if not placed or not placed[0].get("pid"):
            raise InvalidInput(f"no running shard {chosen['shard']!r} in the placement",
                               path="process.shard")
        shard = placed[0]
        return str(shard["node"]), {"pid": int(shard["pid"]), "shard": chosen["shard"]}
    if key == "role":
        if target.kind != "lab":
            raise InvalidInput("role selects a lab process; on a host use pid, name or "
                               "cmdline", path="process.role")
        processes = target.lab_processes()
        matches = [p for p in processes if chosen["role"] in (p.get("role"), p.get("name"))]
        if len(matches) != 1 or not matches[0].get("pid"):
            names = ", ".join(sorted({str(p.get("name")) for p in processes}))
            raise InvalidInput(f"role {chosen['role']!r} matches {len(matches)} lab "
                               f"processes (processes: {names})", path="process.role")
        return _pick_node(target, chosen.get("node")), {"pid": int(matches[0]["pid"]),
                                                        "role": chosen["role"]}
    return _pick_node(target, chosen.get("node")), {key: chosen[key]}


def _host_filters(chosen: dict[str, Any], which: list[str],
                  filters: dict[str, Any]) -> dict[str, Any]:
    """The agent target of a host selector by environment, parent or cgroup (its shape
    checked by :func:`gameday.experiment.process_selector.check_process_selector`)."""
    return {key: chosen[key] for key in (*which, *filters)}


def _in_container(target: Target, chosen: dict[str, Any], which: list[str],
                  filters: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """A Kubernetes pod's container: its node, and the agent target that selects its
    processes by the container ID in their cgroup path."""
    if not isinstance(target, KubernetesTarget):
        raise InvalidInput(f"pod selects a container on --target kubernetes (this run's "
                           f"target is {target.kind})", path="process.pod")
    which = [key for key in which if key != "pod"]
    narrowing = _host_filters(chosen, which, filters) if which or filters else {}
    namespace = chosen["pod"].get("namespace") if isinstance(chosen["pod"], dict) else None
    if isinstance(namespace, str):  # refused before the API is asked anything
        activity.current().blast_radius.check_namespace(namespace)
    container = target.resolve_container(chosen["pod"], where="process.pod")
    return container.node, {**narrowing, "cgroup": container.cgroup_pattern(),
                            "pod": container.pod_label(), "container": container.container}


def _inject(kind: KindSpec[KindParams], action: str, selector: Any, params: dict[str, Any],
            lease_s: float | None) -> dict[str, Any]:
    with activity.failing():
        node, agent_target = resolve_process(selector)
        try:
            entry = activity.inject_on_node(kind.name, node=node, target=agent_target,
                                            params=params, action=action, lease_s=lease_s)
        except AgentError as exc:
            if exc.status == 403:  # a protected process: nothing signalled, the run exits 2
                activity.current().refused = f"{kind.name} refused: {exc}"
            raise
    return activity.applied([entry])
