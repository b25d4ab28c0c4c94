"""``gameday plan EXP`` (and ``gameday run EXP --dry-run``): what a run would do, read-only.

A plan never starts a lab or any process, never injects and never takes a lock. It opens
the target through read-only paths (the running lab's discovery document, agents'
inventories, Kubernetes list calls), resolves every fault action of the method the way
the run would (the action itself runs against a :class:`PreviewSession`, whose injections
stop at the request they would send), asks each agent what the request would hit and
whether it would refuse it (``POST /v1/faults:check``), and judges the whole against the
blast radius, the allowlist and the locks other runs hold now.

:func:`plan` returns a :class:`Plan`; :meth:`Plan.to_json` is ``--output json``,
:func:`render` the terminal form. A plan is admissible when nothing would be refused
(exit 0), else not (exit 2); without a running lab it says what ``run`` would start and
is admissible as far as it can tell (exit 0).
"""

import importlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn, TextIO

from chaoslib import substitute
from chaoslib.exceptions import ActivityFailed

from gameday import paths
from gameday.engine import session as sessions
from gameday.engine.blast_radius import BlastRadius
from gameday.engine.fault_requests import FanoutOptions, InjectRequest
from gameday.errors import AgentError, GamedayError, InvalidInput
from gameday.experiment.loader import LoadedExperiment
from gameday.kinds import KindParams, KindSpec, by_activity
from gameday.safety.halt import halted_lines
from gameday.safety.locks import Holder, live_holders, target_key
from gameday.safety.targetconfig import TargetConfig
from gameday.targets.base import GpuRef, Target, loaded_configuration
from gameday.targets.open import open_target

__all__ = ["CANNOT_PREVIEW", "FaultPlan", "Hit", "Plan", "PreviewSession", "plan", "render"]

#: What a plan says of an agent that answers 404 to ``POST /v1/faults:check``.
CANNOT_PREVIEW = "this agent cannot preview (older than the check endpoint)"

#: Arguments of an activity that say how long it lasts (for the estimated duration).
_DURATION_ARGUMENTS = ("duration_s", "hang_s", "window_s", "timeout_s")


class _Previewed(Exception):
    """Raised by a :class:`PreviewSession` where a fault would be sent to its agents."""

    def __init__(self, requests: Sequence[InjectRequest], lease_s: float | None) -> None:
        super().__init__("previewed")
        self.requests = list(requests)
        self.lease_s = lease_s


class PreviewSession(sessions.Session):
    """A session in which fault actions resolve their targets and stop where they would
    inject: no agent is asked to apply anything, no lock is taken (it has no lock
    directory), nothing is written (its ledger has no file). GPU blast-radius checks are
    collected (:attr:`gpus`) and judged once for the whole plan."""

    def __init__(self, *, target: Target | None, extension: Any,
                 target_config: TargetConfig) -> None:
        super().__init__(target=target, extension=extension, ledger_path=None,
                         target_config=target_config)
        self.collected = _CollectedRadius(self.blast_radius)
        self.blast_radius = self.collected
        self.gpus = self.collected.gpus

    def inject(self, requests: Sequence[InjectRequest], *, action: str = "",
               lease_s: float | None = None, options: FanoutOptions | None = None
               ) -> NoReturn:
        raise _Previewed(requests, lease_s)


class _CollectedRadius(BlastRadius):
    """A plan's blast radius: GPUs are collected (:attr:`gpus`), to be judged once for
    the whole plan by the radius it was made from (:attr:`whole`); the rest is checked
    as the run would."""

    def __init__(self, whole: BlastRadius) -> None:
        super().__init__(whole.limits, whole.config, whole.ledger, whole.fleet_gpus)
        self.whole = whole
        self.gpus: list[GpuRef] = []

    def check_gpus(self, new_gpus: Iterable[GpuRef]) -> None:
        self.gpus.extend(new_gpus)


@dataclass
class Hit:
    """One thing a fault would land on: the agent request (node, target) and, from the
    agent, what it matches and whether it would refuse it."""

    node: str
    target: dict[str, Any]
    params: dict[str, Any] = field(default_factory=dict)
    gpu: GpuRef | None = None
    matches: dict[str, Any] = field(default_factory=dict)
    status: int | None = None
    error: str | None = None
    note: str | None = None  # e.g. CANNOT_PREVIEW
    via: str = "agent"

    @property
    def lock_key(self) -> str:
        return target_key(self.node, self.target)

    def label(self) -> str:
        if self.gpu is not None:
            return self.gpu.label() + (f" ({self.gpu.uuid})" if self.gpu.uuid else "")
        where = ",".join(f"{k}={v}" for k, v in sorted(self.target.items()))
        return f"{self.node}/{where}" if where else self.node

    def to_json(self) -> dict[str, Any]:
        return {"node": self.node, "target": self.target, "params": self.params,
                "gpu": self.gpu.to_json() if self.gpu else None, "via": self.via,
                "lock": self.lock_key, "matches": self.matches, "status": self.status,
                "error": self.error, "note": self.note}


@dataclass
class FaultPlan:
    """One fault action of the method, resolved."""

    position: int
    activity: str
    kind: str
    layer: str
    lease_s: float
    selector: Any
    hits: list[Hit] = field(default_factory=list)
    error: str | None = None  # the action cannot be resolved (file:line: path: message)

    def to_json(self) -> dict[str, Any]:
        return {"position": self.position, "activity": self.activity, "kind": self.kind,
                "injected_at": self.layer, "lease_s": self.lease_s, "selector": self.selector,
                "hits": [hit.to_json() for hit in self.hits], "error": self.error}


@dataclass
class Plan:
    """What ``gameday run`` would do with an experiment, and whether it may."""

    experiment: Path
    target: str
    target_state: str  # "open", "no lab", "none", "unavailable"
    note: str = ""
    faults: list[FaultPlan] = field(default_factory=list)
    refusals: list[str] = field(default_factory=list)
    limits: dict[str, Any] = field(default_factory=dict)
    allowlist: dict[str, Any] = field(default_factory=dict)
    safeguards: list[str] = field(default_factory=list)
    silence: str | None = None
    slo: dict[str, Any] = field(default_factory=dict)
    locks: list[dict[str, Any]] = field(default_factory=list)
    estimated_s: float = 0.0
    custom_actions: list[str] = field(default_factory=list)
    halted: list[str] = field(default_factory=list)  # agents whose safety lever is engaged
    stop_on: str | None = None  # the extension's Alertmanager stop conditions, one line

    @property
    def admissible(self) -> bool:
        return not self.refusals

    @property
    def exit_code(self) -> int:
        return 0 if self.admissible else 2

    def gpus(self) -> list[GpuRef]:
        return [hit.gpu for fault in self.faults for hit in fault.hits if hit.gpu is not None]

    def nodes(self) -> list[str]:
        return sorted({hit.node for fault in self.faults for hit in fault.hits})

    def to_json(self) -> dict[str, Any]:
        return {"experiment": str(self.experiment), "target": self.target,
                "target_state": self.target_state, "note": self.note,
                "admissible": self.admissible, "exit_code": self.exit_code,
                "faults": [fault.to_json() for fault in self.faults],
                "custom_actions": self.custom_actions,
                "blast_radius": {"limits": self.limits, "gpus": len(set(self.gpus())),
                                 "nodes": len(self.nodes())},
                "allowlist": self.allowlist, "safeguards": self.safeguards,
                "silence": self.silence, "slo": self.slo, "locks": self.locks,
                "estimated_duration_s": self.estimated_s, "errors": self.refusals,
                "halted": self.halted, "stop_on": self.stop_on}


def plan(loaded: LoadedExperiment, *, kind: str, variables: Mapping[str, str],
         target_config: TargetConfig, lab_dir: Path,
         locks_dir: Path | None = None) -> Plan:
    """Plan ``loaded`` on the target ``kind``; read-only (see the module doc)."""
    extension = loaded.extension
    result = Plan(experiment=loaded.path, target=kind, target_state="none")
    result.limits = {key: value for key, value in vars(extension.blast_radius).items()
                     if value is not None}
    result.slo = {key: value for key, value in vars(extension.slo).items() if value is not None}
    result.safeguards = [_safeguard_line(guard) for guard in extension.safeguards]
    result.silence = extension.silence.line() if extension.silence is not None else None
    result.stop_on = extension.stop_on.line() if extension.stop_on is not None else None
    if target_config.allowed_nodes is not None or target_config.allowed_namespaces is not None:
        result.allowlist = {"source": target_config.source,
                            "nodes": sorted(target_config.allowed_nodes or ()),
                            "namespaces": sorted(target_config.allowed_namespaces or ())}
    result.estimated_s = estimate_duration(loaded.experiment)
    target: Target | None = None
    if kind != "none":
        try:
            target = open_target(kind, variables, lab_dir=lab_dir)
            result.target_state = "open"
        except GamedayError as exc:
            if kind == "lab":
                result.target_state = "no lab"
                result.note = (f"no lab runs in {lab_dir}: `gameday run` would start one there "
                               "(as `gameday lab up` does) and stop it when the run ends; "
                               "targets are resolved once it runs")
            else:
                result.target_state = "unavailable"
                said = str(exc)
                result.refusals.append(said if said.startswith(f"target {kind}") else
                                       f"target {kind}: {said}")
    session = PreviewSession(target=target, extension=extension, target_config=target_config)
    configuration = loaded_configuration(loaded.experiment, target, variables)
    for position, activity in enumerate(loaded.experiment.get("method") or []):
        provider = activity.get("provider") or {}
        fault_kind = by_activity(str(provider.get("module")), str(provider.get("func")))
        if activity.get("type") != "action" or provider.get("type") != "python":
            continue
        if fault_kind is None:
            if not str(provider.get("module", "")).startswith(("faults.", "verifiers.")):
                result.custom_actions.append(str(activity.get("name")))
            continue
        result.faults.append(_plan_fault(loaded, position, activity, fault_kind, target,
                                         session, configuration, result))
    if target is not None:
        result.halted = halted_lines(target.agents)
        result.refusals.extend(f"safety lever engaged: {line}" for line in result.halted)
        _check_with_agents(target, result)
        _judge(loaded, session, result, locks_dir or paths.ledger_path().parent / "locks")
    return result


def _plan_fault(loaded: LoadedExperiment, position: int, activity: Mapping[str, Any],
                kind: KindSpec[KindParams], target: Target | None, session: PreviewSession,
                configuration: dict[str, Any], result: Plan) -> FaultPlan:
    provider = activity["provider"]
    arguments = dict(substitute(dict(provider.get("arguments") or {}), configuration, {}))
    where = f"method[{position}].provider.arguments"
    lease = float(arguments.get("lease_s") or session.extension.lease_s)
    fault = FaultPlan(position=position, activity=str(activity.get("name")), kind=kind.name,
                      layer=kind.injected_at.get(target.kind if target else result.target,
                                                 "?"),
                      lease_s=lease, selector=arguments.get(kind.selector or ""))
    if target is None:
        if result.target_state == "none":
            fault.error = _located(loaded, f"fault {kind.name} needs a target (use --target "
                                           "lab or set extensions[gameday].target)",
                                   f"method[{position}]")
            result.refusals.append(fault.error)
        return fault
    selector_path = f"{where}.{kind.selector}" if kind.selector else where
    try:
        if kind.module == "faults.k8s":
            fault.hits = _kubernetes_hits(kind, arguments, target, session, selector_path)
        else:
            fault.hits = _captured(kind, arguments, session)
    except (ActivityFailed, GamedayError) as exc:
        text, key_path = str(exc), selector_path
        head, sep, rest = text.partition(": ")
        if sep and kind.selector and " " not in head and \
                head.split(".")[0].split("[")[0] == kind.selector:
            text, key_path = rest, f"{where}.{head}"  # the action named the selector key
        fault.error = _located(loaded, text, key_path)
        result.refusals.append(fault.error)
    return fault


def _captured(kind: KindSpec[KindParams], arguments: Mapping[str, Any],
              session: PreviewSession) -> list[Hit]:
    """Run the fault action in ``session`` up to where it would inject; its requests."""
    func = getattr(importlib.import_module(kind.module), kind.func)
    gpus = {(g.node, g.index): g for g in session.require_target().gpus()} \
        if kind.selector == "gpu" else {}
    sessions.activate(session)
    try:
        func(**arguments)
    except _Previewed as previewed:
        return [Hit(node=r.node, target=dict(r.target), params=dict(r.params),
                    gpu=gpus.get((r.node, int(r.target["gpu"]))) if "gpu" in r.target
                    else None)
                for r in previewed.requests]
    finally:
        sessions.deactivate()
    raise InvalidInput(f"{kind.module}.{kind.func} returned without injecting anything")


def _kubernetes_hits(kind: KindSpec[KindParams], arguments: Mapping[str, Any], target: Target,
                     session: PreviewSession, where: str) -> list[Hit]:
    """Kubernetes-level faults, resolved through list/read calls only."""
    from gameday.targets.kubernetes.target import KubernetesTarget  # only for k8s kinds

    if not isinstance(target, KubernetesTarget) or target.core is None:
        raise InvalidInput(f"{kind.name} needs target kubernetes, not {target.kind}")
    core = target.core
    if kind.selector == "node":
        names = target.resolve_nodes(arguments.get("node") or {},
                                     count=int(arguments.get("count", 1)), where=where)
        session.gpus.extend(target.gpus_on(names))
        for name in names:
            if not session.target_config.node_allowed(name):
                raise InvalidInput(f"node {name} is not in the allowlist of "
                                   f"{session.target_config.source}")
        return [Hit(node=name, target={"k8s": kind.name}, via="kubernetes",
                    matches={"nodes": [name]}) for name in names]
    namespace = str(arguments.get("namespace") or "")
    session.blast_radius.check_namespace(namespace)
    if arguments.get("name"):
        pods = [core.read_namespaced_pod(str(arguments["name"]), namespace)]
    else:
        pods = core.list_namespaced_pod(namespace,
                                        label_selector=arguments.get("label_selector")).items
    names = [f"{namespace}/{pod.metadata.name}" for pod in pods]
    if not names:
        raise InvalidInput(f"no pod in namespace {namespace} matches "
                           f"{arguments.get('label_selector') or arguments.get('name')!r}")
    return [Hit(node=str(pod.spec.node_name or "?"), target={"pod": name}, via="kubernetes",
                matches={"pods": [name]}) for pod, name in zip(pods, names, strict=True)]


def _check_with_agents(target: Target, result: Plan) -> None:
    """Ask each agent what its requests would hit (``POST /v1/faults:check``)."""
    by_node: dict[str, list[tuple[FaultPlan, Hit]]] = {}
    for fault in result.faults:
        for hit in fault.hits:
            if hit.via == "agent":
                by_node.setdefault(hit.node, []).append((fault, hit))
    for node, pairs in sorted(by_node.items()):
        items = [{"kind": fault.kind, "target": hit.target, "params": hit.params,
                  "lease_s": fault.lease_s} for fault, hit in pairs]
        try:
            answers = target.agent(node).check_many(items)
        except AgentError as exc:
            for _, hit in pairs:
                hit.note = CANNOT_PREVIEW if exc.status == 404 else f"cannot check: {exc}"
            if exc.status != 404:
                result.refusals.append(f"agent {node}: {exc}")
            continue
        except GamedayError as exc:
            result.refusals.append(f"agent {node}: {exc}")
            continue
        for (fault, hit), answer in zip(pairs, answers, strict=True):
            hit.matches = dict(answer.get("matches") or {})
            hit.status = answer.get("status") if isinstance(answer.get("status"), int) else None
            if not answer.get("admissible", False):
                hit.error = str(answer.get("error") or f"refused ({hit.status})")
                result.refusals.append(f"{fault.activity}: agent {node} would refuse "
                                       f"{hit.label()}: {hit.status} {hit.error}")


def _judge(loaded: LoadedExperiment, session: PreviewSession, result: Plan,
           locks_dir: Path) -> None:
    """Blast radius and allowlist over the whole plan, and the locks held by others."""
    where = "extensions.gameday.blast_radius"
    try:
        session.collected.whole.check_gpus(session.gpus)
        limit = session.extension.blast_radius.max_nodes
        nodes = result.nodes()
        if limit is not None and len(nodes) > limit:
            raise InvalidInput(f"{len(nodes)} nodes would be faulted, blast_radius.max_nodes "
                               f"is {limit}")
        outside = [n for n in nodes if not session.target_config.node_allowed(n)]
        if outside:
            raise InvalidInput(f"node {outside[0]} is not in the allowlist of "
                               f"{session.target_config.source}")
    except GamedayError as exc:
        result.refusals.append(_located(loaded, str(exc), where))
    holders: dict[str, Holder] = {h.target: h for h in live_holders(locks_dir)}
    for fault in result.faults:
        for hit in fault.hits:
            holder = holders.get(hit.lock_key)
            result.locks.append({"key": hit.lock_key,
                                 "held_by": holder.describe() if holder else None})
            if holder is not None:
                result.refusals.append(f"{fault.activity}: {hit.label()} is locked by "
                                       f"{holder.describe()}")


def _located(loaded: LoadedExperiment, message: str, key_path: str) -> str:
    """``file:line: key.path: message``."""
    return str(InvalidInput(message, file=str(loaded.path), path=key_path,
                            line=loaded.line_of(key_path)))


def _safeguard_line(guard: Any) -> str:
    bounds = ", ".join(f"{name} {value:g}" for name, value in
                       (("min", guard.min), ("max", guard.max), ("equals", guard.equals))
                       if value is not None)
    source = f"promql {guard.promql}" if guard.promql else f"http {guard.http}"
    return f"{guard.name}: {source} ({bounds}; every {guard.interval_s:g} s)"


def estimate_duration(experiment: Mapping[str, Any]) -> float:
    """Seconds a run would take at least: every pause, plus each activity's own duration
    argument (``duration_s``, ``hang_s``, ``window_s``, ``timeout_s``); the steady-state
    probes count twice (before and after the method)."""
    def activity_s(activity: Mapping[str, Any]) -> float:
        pauses = activity.get("pauses") or {}
        total = sum(float(pauses.get(key) or 0) for key in ("before", "after")
                    if isinstance(pauses.get(key) or 0, int | float))
        arguments = (activity.get("provider") or {}).get("arguments") or {}
        own = [float(arguments[name]) for name in _DURATION_ARGUMENTS
               if isinstance(arguments.get(name), int | float)
               and not isinstance(arguments.get(name), bool)]
        return total + (max(own) if own else 0.0)

    hypothesis = experiment.get("steady-state-hypothesis") or {}
    steady = sum(activity_s(p) for p in hypothesis.get("probes") or [] if isinstance(p, dict))
    rest = sum(activity_s(a) for section in ("method", "rollbacks")
               for a in experiment.get(section) or [] if isinstance(a, dict))
    return 2 * steady + rest


def _matches_text(hit: Hit) -> str:
    parts = []
    for key, value in sorted(hit.matches.items()):
        if value is None:  # a scope not given (no peer, no port): nothing to say
            continue
        if key == "processes" and isinstance(value, list):
            parts.append("processes " + ", ".join(
                f"{p.get('pid')} {p.get('command', '')}".strip() for p in value
                if isinstance(p, Mapping)))
        elif key == "gpus" and isinstance(value, list):
            parts.append("GPUs " + ", ".join(
                f"{g.get('index')} {g.get('uuid', '')}".strip() for g in value
                if isinstance(g, Mapping)))
        elif isinstance(value, list):
            parts.append(f"{key} " + ", ".join(str(v) for v in value))
        else:
            parts.append(f"{key} {value}")
    return "; ".join(parts)


def render(result: Plan, out: TextIO) -> None:
    """The plan on a terminal."""
    def say(text: str) -> None:
        print(text, file=out)

    count = len(result.faults)
    say(f"plan: {result.experiment} on target {result.target}: {count} "
        f"fault{'' if count == 1 else 's'}")
    if result.note:
        say(f"  {result.note}")
    for fault in result.faults:
        say(f"  {fault.activity}: {fault.kind} (injected_at {fault.layer}, lease "
            f"{fault.lease_s:g} s)")
        if fault.error:
            say(f"    cannot resolve: {fault.error}")
        elif not fault.hits:
            say(f"    selector {fault.selector} (not resolved: the target is not open)")
        for hit in fault.hits:
            line = f"    -> {hit.label()}"
            matched = _matches_text(hit)
            if matched:
                line += f": {matched}"
            if hit.error:
                line += f" [agent would refuse: {hit.status} {hit.error}]"
            elif hit.note:
                line += f" [{hit.note}]"
            say(line)
    for name in result.custom_actions:
        say(f"  {name}: a custom action (not previewed)")
    gpus, nodes = len(set(result.gpus())), len(result.nodes())
    limits = ", ".join(f"{k} {v:g}" for k, v in result.limits.items()) or "none"
    say(f"  blast radius: {gpus} GPU{'' if gpus == 1 else 's'} on {nodes} "
        f"node{'' if nodes == 1 else 's'} (limits: {limits})")
    if result.allowlist:
        say(f"  allowlist ({result.allowlist['source']}): nodes "
            f"{', '.join(result.allowlist['nodes']) or 'any'}; namespaces "
            f"{', '.join(result.allowlist['namespaces']) or 'any'}")
    for guard in result.safeguards:
        say(f"  safeguard {guard}")
    if result.silence:
        say(f"  {result.silence}")
    if result.stop_on:
        say(f"  {result.stop_on}")
    for lock in result.locks:
        say(f"  lock {lock['key']}: " + (f"held by {lock['held_by']}" if lock["held_by"]
                                         else "free"))
    if result.slo:
        say("  SLOs: " + ", ".join(f"{k} {v:g}" for k, v in result.slo.items()))
    say(f"  estimated duration: at least {result.estimated_s:g} s")
    if result.refusals:
        for refusal in result.refusals:
            say(f"  refused: {refusal}")
        say("plan: NOT admissible; nothing injected")
    else:
        say("plan: admissible; dry run, nothing injected")
