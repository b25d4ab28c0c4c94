"""The public API for your own Chaos Toolkit activities: fault actions and verifier probes.

A fault action of your own injects through the run's session, so its fault goes through
an agent under a lease, lands in the ledger and is reverted by the run like any
built-in one; a verifier of your own records its measurement in the session, so it
reaches the journal and the verdict table, and fails with one line::

    from gameday import activity

    def flag_on(node: str | None = None, lease_s: float | None = None) -> dict[str, Any]:
        with activity.failing():
            entry = activity.inject_on_node("example.flag", node=node, target={"flag": "on"},
                                            action="flag_on", lease_s=lease_s)
        return activity.applied([entry])

    def flag_seen(url: str) -> dict[str, Any]:
        measurement = {"status": ...}
        if measurement["status"] != 200:
            activity.fail("example.flag_seen", "flag not seen at " + url, measurement)
        activity.record("example.flag_seen", True, measurement)
        return measurement

The built-in ``faults`` and ``verifiers`` use these same functions, and reach the engine
through this module only (a rule ``tests/test_architecture.py`` keeps): the run
(:func:`session`, :func:`current`, :func:`target`), failing with one line, verifier
results, faults on nodes and GPUs, reverting some or all of them, Kubernetes-level
faults, and the types these hand out (a recorder and its channels for SLIs, an agent
client, the targets). docs/extending.md walks through a complete example.
"""

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, NoReturn

import structlog
from chaoslib.exceptions import ActivityFailed

from gameday.engine import kubernetes_faults
from gameday.engine import session as sessions
from gameday.engine.fault_requests import InjectRequest
from gameday.engine.recorder import Channel, Recorder, Sampler, Transition, in_flight_for
from gameday.engine.session import Session
from gameday.engine.verifier_result import VerifierResult
from gameday.errors import (
    GamedayError,
    InvalidInput,
    one_line,
)
from gameday.evidence.ledger import FaultEntry
from gameday.experiment.process_selector import FILTERS as PROCESS_FILTERS
from gameday.experiment.process_selector import KEYS as PROCESS_KEYS
from gameday.experiment.process_selector import check_process_selector
from gameday.kinds import KindParams, KindSpec
from gameday.safety import signals
from gameday.targets.base import Target
from gameday.targets.kubernetes.target import KubernetesTarget
from gameday.wire.agent_client import AgentClient

__all__ = [
    "PROCESS_FILTERS",
    "PROCESS_KEYS",
    "ActivityFailed",
    "AgentClient",
    "Channel",
    "FaultEntry",
    "KubernetesTarget",
    "NotInRun",
    "Recorder",
    "Sampler",
    "Session",
    "Target",
    "Transition",
    "VerifierResult",
    "applied",
    "check_nodes",
    "check_process_selector",
    "current",
    "drain_nodes",
    "fail",
    "failing",
    "in_flight_for",
    "inject_on_gpus",
    "inject_on_node",
    "kill_pods",
    "mark_nodes",
    "one_line",
    "pick_node",
    "record",
    "revert_all",
    "revert_kinds",
    "session",
    "target",
    "validated",
]

log = structlog.get_logger("gameday.activity")


class NotInRun(GamedayError):
    """An activity asked for the run's session while no experiment is running."""

    exit_code = 2


# -- the run ---------------------------------------------------------------------------

def session() -> Session:
    """The session of the experiment running now (``gameday run``, or ``chaos run`` with
    the gameday control); :class:`NotInRun` (one line) when none is open."""
    found = sessions.active()
    if found is None:
        raise NotInRun("this activity needs a run: start it with `gameday run EXP` (or "
                       "`chaos run EXP` with the gameday control), not on its own")
    return found


def current() -> Session:
    """The session of the experiment running now, or outside a run a bare one (no
    target, no journal reads it): what a verifier records into, so that it also works as
    a plain function (and under ``chaos run`` without the control)."""
    return sessions.current()


def target() -> Target:
    """The run's target (its agents, service, Prometheus and placement URLs);
    :class:`NotInRun` outside a run, :class:`gameday.errors.TargetUnavailable` in a run
    without a target."""
    return session().require_target()


# -- failing with one line ---------------------------------------------------------------

@contextmanager
def failing() -> Iterator[None]:
    """Turn a :class:`GamedayError` raised in the block into the toolkit's
    ``ActivityFailed`` with its one-line message (the run then fails, exit 1)."""
    try:
        yield
    except GamedayError as exc:
        raise ActivityFailed(str(exc)) from None


def validated(kind: KindSpec[KindParams], arguments: Mapping[str, Any]) -> dict[str, Any]:
    """``kind``'s parameters parsed by its declaration (:mod:`gameday.kinds`; defaults
    filled in), as the JSON the agent is sent, or ``ActivityFailed`` naming the argument.
    An argument the activity got as ``None`` for a parameter that cannot be null means
    "its default"."""
    nullable = {param.name for param in kind.params if param.nullable}
    given = {name: value for name, value in arguments.items()
             if value is not None or name in nullable}
    with failing():
        return kind.parse(given, path="arguments").to_json()


# -- verifier results --------------------------------------------------------------------

def record(verifier: str, passed: bool | None, measurement: Mapping[str, Any],
           reason: str = "") -> VerifierResult:
    """Record one verifier result in the run's session (the journal's ``gameday.verifiers``
    and the verdict table) and log it; ``passed`` None is a measurement with no objective.

    Outside a run the result goes to a bare session that no journal reads, so a verifier
    still works as a plain function (and under ``chaos run`` without the control)."""
    result = VerifierResult(verifier=verifier, passed=passed, measurement=dict(measurement),
                            reason=one_line(reason))
    sessions.current().record(result)
    log.info("verifier result", verifier=verifier, passed=passed, reason=result.reason)
    return result


def fail(verifier: str, reason: str, measurement: Mapping[str, Any] | None = None) -> NoReturn:
    """Record a failed result of ``verifier`` and raise ``ActivityFailed`` with the
    one-line ``reason``."""
    result = record(verifier, False, dict(measurement or {}), reason)
    raise ActivityFailed(result.reason) from None


# -- faults ------------------------------------------------------------------------------

def pick_node(run_target: Target, node: Any, where: str, kind: str) -> str:
    """The node named in a selector, or the only node whose agent can apply ``kind``;
    :class:`InvalidInput` naming ``where`` otherwise."""
    if node is not None:
        if not isinstance(node, str) or node not in run_target.agents:
            raise InvalidInput(f"no node {node!r} in target {run_target.kind} (nodes: "
                               f"{', '.join(sorted(run_target.agents)) or 'none'})",
                               path=f"{where}.node")
        return node
    able = [name for name, client in sorted(run_target.agents.items())
            if kind in client.inventory().get("kinds", {})]
    if len(able) == 1:
        return able[0]
    raise InvalidInput(f"name the node: {len(able)} nodes can apply {kind} "
                       f"({', '.join(able) or 'none'})", path=f"{where}.node")


def check_nodes(run: Session, node: str) -> None:
    """Refuse a fault on ``node`` that would take the run past ``blast_radius.max_nodes``
    or outside the allowlist (:class:`BlastRadiusExceeded`)."""
    run.blast_radius.check_nodes([node])


def inject_on_node(kind: str, *, node: str | None, target: Mapping[str, Any],
                   params: Mapping[str, Any] | None = None, action: str = "",
                   lease_s: float | None = None, where: str = "node") -> FaultEntry:
    """Inject ``kind`` at ``target`` through the agent of ``node`` (None: the only node
    whose agent offers ``kind``), under a lease (``lease_s``, default the experiment's),
    after the node blast-radius check, the allowlist and the target lock; the ledger
    records it and the run reverts it. ``where`` names the selector in errors.

    Raises :class:`GamedayError` subclasses (wrap the call in :func:`failing`)."""
    run = session()
    run_target = run.require_target()
    chosen = pick_node(run_target, node, where, kind)
    check_nodes(run, chosen)
    [entry] = run.inject([InjectRequest(chosen, kind, dict(target), dict(params or {}))],
                         action=action, lease_s=lease_s)
    return entry


def inject_on_gpus(kind: str, gpu: Mapping[str, Any], *, params: Mapping[str, Any] | None = None,
                   action: str = "", lease_s: float | None = None) -> list[FaultEntry]:
    """Inject ``kind`` on every GPU the selector ``gpu`` resolves to on the run's target
    (``{holding_shard: 0}``, ``{node: node-0}``, ``{node: node-0, index: 2}``,
    ``{uuid: ...}``; a Kubernetes target also takes fleet selectors such as
    ``{percent: 10}``), after the GPU blast-radius check; all or nothing, concurrently
    across agents. One ledger entry per
    GPU (target ``{"gpu": index}``), in the selector's order.

    Raises :class:`GamedayError` subclasses (wrap the call in :func:`failing`)."""
    run = session()
    gpus = run.require_target().resolve_gpus(gpu)
    run.blast_radius.check_gpus(gpus)
    checked = dict(params or {})
    return run.inject([InjectRequest(g.node, kind, {"gpu": g.index}, checked) for g in gpus],
                           action=action, lease_s=lease_s)


def applied(entries: Sequence[FaultEntry]) -> dict[str, Any]:
    """What a fault action returns: ``{"faults": [{"id", "node", "target", "injected_at",
    "applied_at", "expires_at", "details"}]}``."""
    return {"faults": [{"id": entry.id, "node": entry.node, "target": entry.target,
                        "injected_at": entry.injected_at, "applied_at": entry.applied_at,
                        "expires_at": entry.expires_at, "details": entry.details}
                       for entry in entries]}


def revert_kinds(prefix: str, reason: str = "rollback") -> int:
    """Revert every active fault of the run whose kind starts with ``prefix`` (for an
    activity such as ``faults.storage.revert`` that lifts its own faults mid-method);
    return how many. Raises :class:`GamedayError` (one line naming each failure) when any
    could not be reverted."""
    run = sessions.current()
    run.require_target()
    chosen = [entry for entry in run.ledger.active()
              if entry.kind.startswith(prefix) and entry.via == "agent"]
    failures = run.injector.revert(chosen, reason)
    if failures:
        raise GamedayError("could not revert: " + "; ".join(failures.values()))
    return len(chosen)


def revert_all() -> dict[str, Any]:
    """Revert every fault the run applied (idempotent): ``{"reverted": N}`` (0 outside a
    run), or ``ActivityFailed`` naming each fault that could not be reverted."""
    run = sessions.current()
    before = len(run.ledger.active())
    why = signals.STATE.interruption  # rollbacks played because a signal cut the run short
    failures = run.revert_all("rollback" if why is None else f"rollback: {why}")
    if failures:
        raise ActivityFailed("could not revert: " + "; ".join(failures))
    return {"reverted": before}


# -- Kubernetes-level faults (through the API, from the orchestrator) -------------------

def mark_nodes(kind: str, action: str, node: Mapping[str, Any], params: Mapping[str, Any],
               lease_s: float | None = None, *,
               taint: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """Cordon (``taint`` None) or taint the nodes the selector ``node`` picks
    (``params["count"]`` of them) on the run's Kubernetes target, after the allowlist and
    the blast radius, each intended in the ledger and marked on its node so that its
    agent undoes it if the run dies; ``[{"id", "node", "revert_by"}]``.

    Raises :class:`GamedayError` subclasses (wrap the call in :func:`failing`)."""
    return kubernetes_faults.mark_nodes(sessions.current(), kind, action, node, params, lease_s,
                                        taint=taint)


def drain_nodes(nodes: list[str], *, attempts: int,
                interval_s: float) -> tuple[list[str], dict[str, str]]:
    """Evict every pod but DaemonSet and mirror pods from ``nodes`` (cordoned first, with
    :func:`mark_nodes`), never forced: the pods evicted and those a PodDisruptionBudget
    kept, with why."""
    return kubernetes_faults.drain_nodes(sessions.current(), nodes, attempts=attempts,
                                         interval_s=interval_s)


def kill_pods(kind: str, params: Mapping[str, Any], lease_s: float | None = None) -> list[str]:
    """Delete the Running pods ``params`` picks (``namespace``, ``label_selector`` or
    ``name``, ``node``, ``count`` drawn with ``seed``, ``grace_period_s``) after the
    namespace allowlist, each recorded as reverted at once (no inverse); the pods killed."""
    return kubernetes_faults.kill_pods(sessions.current(), kind, params, lease_s)
