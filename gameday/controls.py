"""The ``gameday`` Chaos Toolkit control: gameday's guarantees under ``chaos run``.

Declare it in an experiment::

    controls:
      - name: gameday
        provider: {type: python, module: gameday.controls}

``gameday run`` always adds it. It opens the run's session (target from the
``gameday`` extension, e.g. a running lab), offers the target's endpoints as
configuration (``${service_url}``, ``${prometheus_url}``, ``${placement_url}``), maps
SIGTERM/SIGHUP to an interruption that rolls back, enforces activity timeouts, always
reverts every fault in the ledger at the end, and marks the journal ``failed`` when the
steady state before was unmet or a fault or verifier failed, so ``chaos run`` exits 1.
Given an ``sli`` argument (``arguments: {sli: {http: "${service_url}/predict"}}``, see
``verifiers.sli``) it records that SLI from just before the method to the end of the run
(``gameday.engine.recorder``; the journal's ``gameday.sli`` section).

Gaps under plain ``chaos run`` (``gameday run`` has none of them): the toolkit's own
rollback strategy still skips the experiment's rollbacks after an interruption (the
faults are reverted by this control anyway; pass ``--rollback-strategy always`` to play
other rollbacks too); a tolerance that raises still escapes the toolkit without a
journal (this control's cleanup still reverts the faults); an error while opening the
target makes the toolkit drop the control silently, so the fault actions then fail
with "needs a run" or "needs a target".
"""

import sys
from typing import Any

import structlog

from gameday import paths
from gameday.engine import session as sessions
from gameday.engine import stops, timeouts
from gameday.engine.judge import judge
from gameday.errors import GamedayError
from gameday.evidence.journal_shape import GamedaySection
from gameday.experiment.extension import parse_extension
from gameday.safety import signals, targetconfig
from gameday.safety.safeguards import SafeguardWatch, interrupt_main_thread
from gameday.safety.stop_conditions import StopConditionWatch
from gameday.targets.open import open_target

log = structlog.get_logger("gameday.controls")

__all__ = ["after_activity_control", "after_experiment_control", "after_hypothesis_control",
           "after_method_control", "after_rollback_control", "before_activity_control",
           "before_method_control", "cleanup_control", "configure_control"]

_owned: list[sessions.Session] = []
_watches: list[SafeguardWatch | StopConditionWatch] = []


def configure_control(configuration: dict[str, Any] | None = None,
                      secrets: dict[str, Any] | None = None,
                      experiment: dict[str, Any] | None = None, **_: Any) -> None:
    """Install signal handling; under ``chaos run``, open the session and its target
    (settings from the secrets, under the configuration, as ``gameday run`` reads them)."""
    signals.install()
    stops.install()
    session = sessions.active()
    if session is None:
        try:
            extension = parse_extension(experiment or {})
            settings: dict[str, Any] = {}
            for scope in (secrets or {}).values():
                if isinstance(scope, dict):
                    settings.update(scope)
            settings.update(configuration or {})
            target = open_target(extension.target or "none", settings,
                                 lab_dir=paths.lab_dir())
        except GamedayError as exc:
            print(f"gameday: {exc}", file=sys.stderr)
            raise
        session = sessions.Session(target=target, extension=extension,
                                   ledger_path=paths.ledger_path(),
                                   target_config=targetconfig.from_environment())
        sessions.activate(session)
        _owned.append(session)
    if configuration is not None and session.target is not None:
        for key, value in session.target.configuration().items():
            configuration.setdefault(key, value)


def before_activity_control(context: dict[str, Any], **_: Any) -> None:
    sessions.current().activity = str(context.get("name", ""))
    timeouts.arm(context)


def after_activity_control(context: dict[str, Any], state: dict[str, Any] | None = None,
                           **_: Any) -> None:
    timeouts.disarm()
    if isinstance(state, dict) and state.get("status") == "failed":
        sessions.current().doubt(f"{context.get('type', 'activity')} "
                                 f"{context.get('name', '?')!r} failed")


def after_hypothesis_control(context: dict[str, Any], state: dict[str, Any] | None = None,
                             **_: Any) -> None:
    """Note an unmet steady state in the session (its outputs are then no evidence)."""
    if isinstance(state, dict) and not state.get("steady_state_met", True):
        sessions.current().doubt(f"steady state {context.get('title', '')!r} unmet")


def before_method_control(context: dict[str, Any],
                          configuration: dict[str, Any] | None = None,
                          sli: dict[str, Any] | None = None, **_: Any) -> None:
    """Create the extension's Alertmanager silence, start watching its safeguards
    (``gameday.safety.safeguards``) and its stop conditions
    (``gameday.safety.stop_conditions``) for the method, and start the run's SLI recorder
    when the control has an ``sli`` argument."""
    session = sessions.current()
    session.hold_silence()
    if sli is not None:
        _start_recorder(session, sli)

    def breached() -> None:
        session.breach = watch.breach
        session.event("safeguard_breached", reason=watch.breach)
        interrupt_main_thread()

    watch = SafeguardWatch(session.extension.safeguards, configuration or {},
                           clock=session.clock, on_breach=breached)
    if watch.start():
        _watches.append(watch)
    if session.extension.stop_on is not None:
        _watches.append(StopConditionWatch(
            session.extension.stop_on, clock=session.clock,
            on_fire=lambda reason, detail: session.stop(reason, "stop_condition",
                                                        **detail)).start())


def after_method_control(context: dict[str, Any], **_: Any) -> None:
    _stop_watches()


def after_rollback_control(context: Any = None, **_: Any) -> None:
    """The rollbacks put the system back: expire the run's silence."""
    sessions.current().end_silence("rollbacks-done")


def _start_recorder(session: sessions.Session, sli: dict[str, Any]) -> None:
    """Sample ``sli`` (see ``verifiers.sli``) from now until the session closes; the
    journal keeps the samples in ``gameday.sli`` and the transitions on the timeline."""
    from verifiers.sli import recorder_for

    if session.recorder is not None:
        return
    try:
        session.recorder = recorder_for(sli, session.clock, on_transition=lambda name, r:
                                        session.event("sli_up" if r.ok else "sli_down",
                                                      at=r.t, channel=name, error=r.error))
    except GamedayError as exc:
        print(f"gameday: control argument sli: {exc}", file=sys.stderr)
        raise
    session.recorder.start()


def _stop_watches() -> None:
    while _watches:
        _watches.pop().stop()


def after_experiment_control(context: dict[str, Any], state: dict[str, Any] | None = None,
                             **_: Any) -> None:
    """Revert everything; under ``chaos run`` also judge the journal the toolkit writes."""
    timeouts.disarm()
    _stop_watches()
    if not _owned or state is None:
        return
    session = _owned[-1]
    with signals.deferred():
        failures = session.close(_why_ended(state))
    verdict = judge(state, signal_exit=signals.STATE.exit_code, revert_failures=failures,
                    error=session.breach)
    section: GamedaySection = {
        "run_id": session.run_id, "verdict": verdict.to_json(),
        "faults": [e.to_json() for e in session.ledger],
        "verifiers": [r.to_json() for r in session.results],
        "timeline": [event.to_json() for event in session.timeline],
        "sli": session.recorder.to_json() if session.recorder else None}
    state["gameday"] = section
    if not verdict.passed and state.get("status") == "completed":
        state["status"] = "failed"


def _why_ended(state: dict[str, Any]) -> str:
    """The reason the run's last reverts record: the signal that interrupted it (the
    toolkit may have caught it first: then only that it was interrupted), or
    ``run-ended``."""
    if signals.STATE.interruption is not None:
        return signals.STATE.interruption
    return "interrupted" if state.get("status") == "interrupted" else "run-ended"


def cleanup_control(**_: Any) -> None:
    """Last line of defence: revert whatever is still active, close the session."""
    timeouts.disarm()
    _stop_watches()
    while _owned:
        session = _owned.pop()
        with signals.deferred():
            session.close("run-ended")
        sessions.deactivate()
