"""The run session: what faults and verifiers share while one experiment runs.

Chaos Toolkit calls activities as plain functions, so the session is process-global:
the runner (or the ``gameday.controls`` module under ``chaos run``) opens one, fault
actions inject through it, verifiers read the fault onset and record their results in
it, and closing it reverts everything still in the ledger.

What only a run with faults needs (the injector with its fan-out and agent client, the
lease renewer, the Alertmanager silence) is imported when the run first uses it: a run
of plain probes and actions imports none of it.
"""

import functools
import threading
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog

from gameday.clock import SYSTEM_CLOCK, Clock
from gameday.engine import stops
from gameday.engine.blast_radius import BlastRadius
from gameday.errors import TargetUnavailable
from gameday.evidence.ledger import FaultEntry, Ledger
from gameday.experiment.extension import Extension
from gameday.safety.locks import TargetLocks
from gameday.safety.targetconfig import TargetConfig
from gameday.targets.base import GpuRef, Target

if TYPE_CHECKING:
    from gameday.engine.fault_requests import FanoutOptions, InjectRequest
    from gameday.engine.injector import FaultInjector
    from gameday.engine.leases import FaultRoute, LeaseRenewer
    from gameday.engine.recorder import Recorder
    from gameday.engine.verifier_result import VerifierResult
    from gameday.safety.alertmanager import SilenceHold

log = structlog.get_logger("gameday.engine.session")


@dataclass(slots=True)
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
        self.recorder: Recorder | None = None  # the run's SLI recorder (gameday.engine.recorder)
        self.target_config = target_config or TargetConfig()
        # one flock per faulted target, next to the ledger: $GAMEDAY_HOME/locks
        self.locks = TargetLocks(ledger_path.parent / "locks" if ledger_path else None,
                                 self.run_id)
        self.breach: str | None = None  # why a safeguard interrupted the run
        self.silence: SilenceHold | None = None  # the extension's Alertmanager silence
        self.refused: str | None = None  # why an agent refused a fault as invalid (exit 2)
        self._doubts: list[str] = []  # why this run's outputs are no evidence (see doubt)
        self.blast_radius = BlastRadius(self.extension.blast_radius, self.target_config,
                                        self.ledger, functools.partial(_fleet_size, target))
        self._fault_path: tuple[FaultInjector, LeaseRenewer] | None = None
        self._fault_path_lock = threading.Lock()

    # -- the fault path, made when first needed ----------------------------------------
    def _faults(self) -> "tuple[FaultInjector, LeaseRenewer]":
        """The run's injector and the lease renewer it starts, made together the first
        time either is asked for."""
        with self._fault_path_lock:
            if self._fault_path is None:
                from gameday.engine.injector import FaultInjector
                from gameday.engine.leases import LeaseRenewer

                target = self.target
                renewer = LeaseRenewer(self.ledger, target.agents if target else {},
                                       clock=self.clock, routes=self.routes)
                renewer.on_halt = lambda line: self.stop(line, "halted")
                injector = FaultInjector(
                    run_id=self.run_id, ledger=self.ledger, clock=self.clock,
                    target=self.require_target, radius=self.blast_radius, locks=self.locks,
                    lease_s=self.extension.lease_s, events=self.events, renewer=renewer,
                    routes=self.routes)
                self._fault_path = (injector, renewer)
            return self._fault_path

    @property
    def injector(self) -> "FaultInjector":
        """What applies and reverts the run's faults and records them in the ledger
        (:class:`gameday.engine.injector.FaultInjector`)."""
        return self._faults()[0]

    @property
    def renewer(self) -> "LeaseRenewer":
        """What renews the leases of the run's faults
        (:class:`gameday.engine.leases.LeaseRenewer`)."""
        return self._faults()[1]

    # -- target --------------------------------------------------------------------
    def require_target(self) -> Target:
        return _required(self.target)

    # -- faults ----------------------------------------------------------------------
    def inject(self, requests: "Sequence[InjectRequest]", *, action: str = "",
               lease_s: float | None = None, options: "FanoutOptions | None" = None
               ) -> list[FaultEntry]:
        """Apply the faults ``requests`` ask for through their nodes' agents, under a
        lease, all or nothing; one fault is a batch of one
        (:meth:`gameday.engine.injector.FaultInjector.inject`: intend, admit, send,
        record). Returns the ledger entries in the order of ``requests``; raises
        :class:`gameday.engine.fault_requests.FanoutFailed` (a result per request) after
        rolling back, or a single request's own error."""
        return self.injector.inject(requests, action=action, lease_s=lease_s,
                                    options=options)

    def revert_all(self, reason: str = "rollback") -> list[str]:
        """Revert every fault still active in the ledger, and resolve the requests whose
        answer was never read; return one line per failure. Every fault, intent and route
        of the run is recorded by its injector: without one, there is nothing to revert."""
        if self._fault_path is None:
            return []
        return self.injector.revert_all(reason, agents=self.target is not None)

    def fault_onset(self) -> float | None:
        """When the most recent fault was applied (the agent's ``applied_at``)."""
        entries = self.ledger.entries()
        return max((e.applied_at for e in entries), default=None)

    def faulted_gpus(self) -> list[GpuRef]:
        return [GpuRef(node=e.node, index=int(e.target["gpu"])) for e in self.ledger
                if isinstance(e.target.get("gpu"), int)]

    # -- results and timeline --------------------------------------------------------
    def record(self, result: "VerifierResult") -> None:
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
        from gameday.safety.alertmanager import SilenceHold

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
        if self._fault_path is not None:
            self.renewer.stop()
            # the injector and renewer call back into the session (a cycle): let them go,
            # so a closed run's ledger view and timeline go with its last reference,
            # without waiting for the cyclic collector (a fleet's are a million objects)
            self._fault_path = None
        self.locks.release_all()
        self.ledger.close()  # until a later line (the file stays whole)
        return failures


def _required(target: Target | None) -> Target:
    if target is None:
        raise TargetUnavailable(
            "this activity needs a target: run with `gameday run --target lab` or add the "
            "gameday extension with a target")
    return target


def _fleet_size(target: Target | None) -> int:
    """How many GPUs ``target`` has (a function of the target, not of the session: what
    the session holds must not hold it back, :meth:`Session.close`)."""
    return len(_required(target).gpus())


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
