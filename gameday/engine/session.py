"""The run session: what faults and verifiers share while one experiment runs.

Chaos Toolkit calls activities as plain functions, so the session is process-global:
the runner (or the ``gameday.controls`` module under ``chaos run``) opens one, fault
actions inject through it, verifiers read the fault onset and record their results in
it, and closing it reverts everything still in the ledger.
"""

import dataclasses
import threading
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from gameday.clock import SYSTEM_CLOCK, Clock
from gameday.engine import stops
from gameday.engine.leases import FaultRoute, LeaseRenewer
from gameday.engine.recorder import Recorder
from gameday.engine.session_fanout import (
    FanoutOptions,
    InjectRequest,
    inject_requests,
    revert_entries,
)
from gameday.engine.verifier_result import VerifierResult
from gameday.errors import AgentError, BlastRadiusExceeded, GamedayError, TargetUnavailable
from gameday.evidence.ledger import FaultEntry, Intent, Ledger, new_request_ids
from gameday.experiment.extension import Extension
from gameday.safety.alertmanager import SilenceHold
from gameday.safety.locks import TargetLocks, target_key
from gameday.safety.targetconfig import TargetConfig
from gameday.targets.base import GpuRef, Target
from gameday.wire.protocol import MAX_BATCH_ITEMS

log = structlog.get_logger("gameday.engine.session")


@dataclass
class TimelineEvent:
    t: float
    name: str
    detail: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"t": self.t, "event": self.name, **self.detail}


class Session:
    """One experiment run's shared state."""

    def __init__(self, *, target: Target | None = None, extension: Extension | None = None,
                 ledger_path: Path | None = None, clock: Clock = SYSTEM_CLOCK,
                 run_id: str | None = None, target_config: TargetConfig | None = None
                 ) -> None:
        self.run_id = run_id or uuid.uuid4().hex[:12]
        self.target = target
        self.extension = extension or Extension()
        self.ledger = Ledger(ledger_path, self.run_id)
        self.clock = clock
        self.results: list[VerifierResult] = []
        self.golden: dict[str, Any] = {}
        self.timeline: list[TimelineEvent] = []
        self.activity = ""  # the name of the activity running now (set by the control)
        self._lock = threading.Lock()
        # how faults applied other than through an agent are renewed and reverted, by via
        self.routes: dict[str, FaultRoute] = {}
        self.renewer = LeaseRenewer(self.ledger, target.agents if target else {}, clock=clock,
                                    routes=self.routes)
        self.renewer.on_halt = lambda line: self.stop(line, "halted")
        self.recorder: Recorder | None = None  # the run's SLI recorder (gameday.engine.recorder)
        self.target_config = target_config or TargetConfig()
        # one flock per faulted target, next to the ledger: $GAMEDAY_HOME/locks
        self.locks = TargetLocks(ledger_path.parent / "locks" if ledger_path else None,
                                 self.run_id)
        self.breach: str | None = None  # why a safeguard interrupted the run
        self.silence: SilenceHold | None = None  # the extension's Alertmanager silence
        self.refused: str | None = None  # why an agent refused a fault as invalid (exit 2)
        self._doubts: list[str] = []  # why this run's outputs are no evidence (see doubt)
        self._fleet: int | None = None

    # -- target --------------------------------------------------------------------
    def require_target(self) -> Target:
        if self.target is None:
            raise TargetUnavailable(
                "this activity needs a target: run with `gameday run --target lab` or add the "
                "gameday extension with a target")
        return self.target

    # -- faults ----------------------------------------------------------------------
    def check_blast_radius(self, new_gpus: list[GpuRef]) -> None:
        """Refuse (before injecting) a fault that would take the run past its blast radius."""
        limit = self.extension.blast_radius
        touched = {(e.node, e.target.get("gpu")) for e in self.ledger if "gpu" in e.target}
        touched |= {(g.node, g.index) for g in new_gpus}
        nodes = {node for node, _ in touched}
        outside = sorted(n for n in nodes if not self.target_config.node_allowed(n))
        if outside:
            raise BlastRadiusExceeded(
                f"node {outside[0]} is not in the allowlist of {self.target_config.source} "
                f"(allow.nodes: {', '.join(sorted(self.target_config.allowed_nodes or ()))}); "
                "nothing injected")
        if limit.max_gpus is not None and len(touched) > limit.max_gpus:
            raise BlastRadiusExceeded(
                f"{len(touched)} GPUs would be faulted, blast_radius.max_gpus is "
                f"{limit.max_gpus}; nothing injected")
        if limit.max_nodes is not None and len(nodes) > limit.max_nodes:
            raise BlastRadiusExceeded(
                f"{len(nodes)} nodes would be faulted, blast_radius.max_nodes is "
                f"{limit.max_nodes}; nothing injected")
        if limit.max_percent is not None and touched:
            fleet = self.fleet_gpus()
            percent = 100.0 * len(touched) / fleet if fleet else 100.0
            if percent > limit.max_percent:
                raise BlastRadiusExceeded(
                    f"{len(touched)} of the fleet's {fleet} GPUs ({percent:.1f}%) would be "
                    f"faulted, blast_radius.max_percent is {limit.max_percent:g}; "
                    "nothing injected")

    def check_namespace(self, namespace: str) -> None:
        """Refuse (before injecting) a Kubernetes-level fault outside ``allow.namespaces``."""
        if not self.target_config.namespace_allowed(namespace):
            raise BlastRadiusExceeded(
                f"namespace {namespace} is not in the allowlist of {self.target_config.source} "
                f"(allow.namespaces: "
                f"{', '.join(sorted(self.target_config.allowed_namespaces or ()))}); "
                "nothing injected")

    def fleet_gpus(self) -> int:
        """How many GPUs the whole target has, from the agents' inventories (cached)."""
        if self._fleet is None:
            self._fleet = len(self.require_target().gpus())
        return self._fleet

    def inject(self, *, node: str, kind: str, target: dict[str, Any], params: dict[str, Any],
               action: str = "", lease_s: float | None = None, record: bool = True
               ) -> FaultEntry:
        """Apply one fault through the node's agent, under a lease, and record it (unless
        ``record`` is false: then the caller records it with :meth:`record_applied`).

        The single-fault path of :meth:`inject_many`: the same admission
        (:meth:`admit`), entry and record; one plain ``POST /v1/faults``."""
        client = self.require_target().agent(node)
        self.admit(node, target)
        lease = self.lease(lease_s)
        [request] = self.intend([InjectRequest(node, kind, target, params)], lease=lease,
                                action=action)
        try:
            fault = client.inject(kind, target, params, lease, run=self.run_id,
                                   request_id=request.request_id)
        except AgentError as exc:
            self.not_applied([(request, exc)])
            raise
        entry = self.entry(request, client.url, fault, lease=lease, action=action)
        if record:
            self.record_applied([entry])
        return entry

    def inject_many(self, requests: Sequence[InjectRequest], *, action: str = "",
                    lease_s: float | None = None, options: FanoutOptions | None = None
                    ) -> list[FaultEntry]:
        """Apply many faults concurrently, one batch per agent, all or nothing
        (:func:`gameday.engine.session_fanout.inject_requests`): each admitted as by
        :meth:`inject`, all recorded with one ledger write. Returns the entries in the order
        of ``requests``; raises :class:`gameday.engine.session_fanout.FanoutFailed` (with a
        result per request) after rolling back, or a single request's own error."""
        return inject_requests(self, requests, action=action, lease_s=lease_s,
                               options=options)

    def intend(self, requests: Sequence["InjectRequest"], *, lease: float, action: str = ""
               ) -> list["InjectRequest"]:
        """Give each request a request id and record their intents in the ledger (one
        fsync'd write) before any of them is sent; returns the requests with their ids."""
        target = self.require_target()
        named = [dataclasses.replace(request, request_id=request_id) for request, request_id
                 in zip(requests, new_request_ids(len(requests)), strict=True)]
        urls = {node: target.agent(node).url for node in {r.node for r in named}}
        self.ledger.record_intents([
            Intent(request_id=r.request_id, kind=r.kind, node=r.node, agent_url=urls[r.node],
                   target=dict(r.target), params=dict(r.params), lease_s=lease, action=action)
            for r in named])
        return named

    def not_applied(self, failed: Sequence[tuple["InjectRequest", BaseException]]) -> None:
        """Record failed requests as not applied: those never sent (any error but an
        :class:`AgentError`) and those the agent refused; one without an answer (an
        :class:`AgentError` without ``status``) stays open, for :meth:`resolve_intents`."""
        self.ledger.record_not_applied([
            (request.request_id, str(exc).strip().splitlines()[0] if str(exc).strip()
             else type(exc).__name__) for request, exc in failed
            if request.request_id and not (isinstance(exc, AgentError) and exc.status is None)])

    def resolve_intents(self) -> list[str]:
        """Ask the agents about this run's requests whose answer was never read: each is
        reverted if the agent applied it, and refused from now on if not (one request
        per agent and 1,024 ids); the outcome is recorded. Returns one line per request
        left open."""
        by_node: dict[str, list[Intent]] = {}
        failures: list[str] = []
        for intent in self.ledger.open_intents():
            if intent.via == "agent":
                by_node.setdefault(intent.node, []).append(intent)
                continue
            try:  # a route's revert is idempotent: it tells whether the change was there
                reverted_at, why = self.routes[intent.via].revert(intent.entry(self.clock.now()))
            except (GamedayError, KeyError) as exc:
                failures.append(f"{intent.kind} request {intent.request_id} on {intent.node} "
                                f"via {intent.via}: {exc}")
                continue
            held = why == "requested"
            self.ledger.record_resolved(intent.request_id, "reverted" if held else "not_held",
                                        intent.request_id if held else None, reverted_at)
        chunks = [(node, intents[start:start + MAX_BATCH_ITEMS])
                  for node, intents in by_node.items()
                  for start in range(0, len(intents), MAX_BATCH_ITEMS)]
        for node, intents in chunks:
            try:
                answers = self.require_target().agent(node).resolve_requests(
                    [intent.request_id for intent in intents])
            except (AgentError, TargetUnavailable) as exc:
                failures.extend(f"{i.kind} request {i.request_id} on {node}: {exc}"
                                for i in intents)
                continue
            for answer in answers:
                fault = answer.get("fault") or {}
                self.ledger.record_resolved(str(answer.get("request_id")),
                                            str(answer.get("outcome")), fault.get("id"),
                                            fault.get("reverted_at"))
        return failures

    def lease(self, lease_s: float | None = None) -> float:
        """The lease a fault gets: ``lease_s``, else the extension's ``lease_s``."""
        return float(lease_s or self.extension.lease_s)

    def admit(self, node: str, target: Mapping[str, Any]) -> None:
        """Before a fault is injected on ``node``/``target``: refuse a node outside the
        allowlist (:class:`BlastRadiusExceeded`), then take the target's lock
        (:class:`gameday.safety.locks.TargetLocked` naming the holder)."""
        self.admit_many(node, [target])

    def admit_many(self, node: str, targets: Sequence[Mapping[str, Any]]) -> None:
        """:meth:`admit` for several targets of one node, in order: the allowlist is
        checked once, the locks are taken together (a refused one raises
        :class:`gameday.safety.locks.TargetLocked` with its ``index``; those before it stay
        locked)."""
        if not self.target_config.node_allowed(node):
            raise BlastRadiusExceeded(f"node {node} is not in the allowlist of "
                                      f"{self.target_config.source}; nothing injected")
        self.locks.acquire_many([target_key(node, target) for target in targets])

    @staticmethod
    def entry(request: InjectRequest, agent_url: str, fault: Mapping[str, Any], *,
              lease: float, action: str = "") -> FaultEntry:
        """The ledger entry of ``request`` as the agent applied it (``fault``)."""
        return FaultEntry(
            id=str(fault["id"]), kind=request.kind, node=request.node, agent_url=agent_url,
            target=dict(request.target), params=dict(request.params),
            injected_at=str(fault.get("injected_at", "")),
            applied_at=float(fault["applied_at"]), expires_at=float(fault["expires_at"]),
            lease_s=lease, action=action, details=dict(fault.get("details") or {}),
            request_id=request.request_id)

    def record_applied(self, entries: Sequence[FaultEntry]) -> None:
        """Record applied agent faults (one fsync'd ledger write), put them on the
        timeline, and start the lease renewer."""
        if not entries:
            return
        self.ledger.record_applied_many(list(entries))  # fsync'd (a fan-out wrote them)
        self.events("fault_applied", [
            {"id": entry.id, "kind": entry.kind, "node": entry.node, "target": entry.target,
             "injected_at": entry.injected_at, "at": entry.applied_at} for entry in entries])
        self.renewer.start()
        if len(entries) == 1:
            entry = entries[0]
            log.info("fault applied", id=entry.id, kind=entry.kind, node=entry.node,
                     target=entry.target, injected_at=entry.injected_at)

    def intend_external(self, intent: Intent, route: FaultRoute) -> None:
        """Record the intent of a change about to be made other than through an agent
        (``intent.via``), which ``route`` renews and reverts (and resolves, if its
        outcome is never recorded)."""
        self.routes[intent.via] = route
        self.ledger.record_intents([intent])

    def record_external(self, entry: FaultEntry, route: FaultRoute) -> None:
        """Record a fault applied other than through an agent (``entry.via``, e.g. a
        cordon through the Kubernetes API); ``route`` renews and reverts it."""
        self.routes[entry.via] = route
        self.ledger.record_applied(entry)
        self.event("fault_applied", id=entry.id, kind=entry.kind, node=entry.node,
                   target=entry.target, injected_at=entry.injected_at, at=entry.applied_at)
        self.renewer.start()

    def _revert_routed(self, reason: str) -> list[str]:
        failures: list[str] = []
        for entry in [e for e in self.ledger.active() if e.via != "agent"]:
            try:
                reverted_at, why = self.routes[entry.via].revert(entry)
                self.ledger.record_reverted(entry.id, reverted_at, why)
                self.event("fault_reverted", id=entry.id, kind=entry.kind, at=reverted_at)
            except (GamedayError, KeyError) as exc:
                failures.append(f"{entry.kind} {entry.id} on {entry.node} via {entry.via}: "
                                f"{exc}")
        return failures

    def revert_all(self, reason: str = "rollback") -> list[str]:
        """Revert every fault still active in the ledger, and resolve the requests whose
        answer was never read; return one line per failure."""
        failures: list[str] = self._revert_routed(reason)
        if self.target is not None:
            failures += self.resolve_intents()
        if self.target is not None and len(self.ledger.active()) > 1:  # many: concurrently
            revert_entries(self, self.ledger.active(), reason)
        for entry in self.ledger.active():
            try:
                client = self.require_target().agent(entry.node)
                fault = client.revert(entry.id)
                reverted_at = float(fault.get("reverted_at") or self.clock.now())
                self.ledger.record_reverted(entry.id, reverted_at,
                                            str(fault.get("revert_reason") or reason))
                self.event("fault_reverted", id=entry.id, kind=entry.kind, at=reverted_at)
            except (AgentError, TargetUnavailable) as exc:
                failures.append(f"{entry.kind} {entry.id} on {entry.node}: {exc}")
        return failures

    def fault_onset(self) -> float | None:
        """When the most recent fault was applied (the agent's ``applied_at``)."""
        entries = self.ledger.entries()
        return max((e.applied_at for e in entries), default=None)

    def faulted_gpus(self) -> list[GpuRef]:
        return [GpuRef(node=e.node, index=int(e.target["gpu"])) for e in self.ledger
                if isinstance(e.target.get("gpu"), int)]

    # -- results and timeline --------------------------------------------------------
    def record(self, result: VerifierResult) -> None:
        with self._lock:
            if not result.at:
                result.at = self.clock.now()
            if not result.name:
                result.name = self.activity
            self.results.append(result)

    def doubt(self, reason: str) -> None:
        """Note that this run's outputs are not evidence from now on (a probe failed, a
        steady state was unmet): ``reason`` is one line."""
        with self._lock:
            self._doubts.append(reason)

    def doubts(self) -> list[str]:
        """Why this run's outputs are not evidence: each failed verifier, and what
        :meth:`doubt` noted; empty while all is well."""
        with self._lock:
            failed = [f"verifier {r.name or r.verifier} failed: {r.reason}"
                      for r in self.results if r.passed is False]
            return failed + list(self._doubts)

    def stop(self, reason: str, event: str, **detail: Any) -> None:
        """Stop the run from any thread (:func:`gameday.engine.stops.request`): the
        first reason is the run's ``breach`` (its verdict fails with it, exit 1) and an
        ``event`` on the timeline."""
        with self._lock:
            first = self.breach is None
            if first:
                self.breach = reason
        if first:
            self.event(event, reason=reason, **detail)
            stops.request(reason)

    def event(self, name: str, /, **detail: Any) -> None:
        self.events(name, [detail])

    def events(self, name: str, details: Iterable[dict[str, Any]]) -> None:
        """Put an event ``name`` per detail on the timeline, all at one time."""
        now = self.clock.now()
        with self._lock:
            self.timeline.extend(TimelineEvent(now, name, detail) for detail in details)

    def hold_silence(self) -> None:
        """Create the extension's Alertmanager silence (once), recorded in the ledger and
        on the timeline, held a lease ahead until :meth:`end_silence`."""
        spec = self.extension.silence
        if spec is None or self.silence is not None:
            return
        hold = SilenceHold(spec, self.extension.lease_s, clock=self.clock,
                           on_created=self.ledger.record_silence,
                           on_expired=self.ledger.record_silence_expired)
        silence_id = hold.start()
        self.silence = hold
        self.event("silence_created", silence_id=silence_id, alertmanager=spec.alertmanager,
                   matchers=[m.line() for m in spec.matchers])

    def end_silence(self, reason: str) -> None:
        """Expire the run's silence, if it holds one (idempotent)."""
        if self.silence is not None and not self.silence.ended:
            self.silence.end(reason)
            if self.silence.ended:
                self.event("silence_expired", silence_id=self.silence.silence_id,
                           reason=reason)

    def close(self, reason: str = "rollback") -> list[str]:
        if self.recorder is not None:
            self.recorder.stop()
        failures = self.revert_all(reason)
        self.end_silence(reason)
        self.renewer.stop()
        self.locks.release_all()
        return failures


_current: Session | None = None
_current_lock = threading.Lock()


def current() -> Session:
    """The active session; a bare one (no target) when called outside a run."""
    global _current
    with _current_lock:
        if _current is None:
            _current = Session()
        return _current


def active() -> Session | None:
    """The session a runner or control opened, or None."""
    with _current_lock:
        return _current


def activate(session: Session) -> Session:
    global _current
    with _current_lock:
        _current = session
    return session


def deactivate() -> None:
    global _current
    with _current_lock:
        _current = None
