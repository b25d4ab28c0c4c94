"""``gameday run``: one experiment on the Chaos Toolkit, with gameday's guarantees.

A dry run (``--dry-run``, ``gameday plan``) is :func:`preview`: read-only, see
:mod:`gameday.engine.plan`.

Flow (docs/architecture.md): load + validate → open the target (starting a lab if the target is
``lab`` and none runs) → resolve every fault's targets and check the blast radius →
run on chaoslib with rollbacks always played, signals mapped to interruptions and
timeouts enforced (through ``gameday.controls``) → revert everything in the ledger →
judge → write the journal → return the outcome (the CLI prints it). Nothing is injected when
validation, target resolution or the blast-radius check fails.
"""

import copy
import dataclasses
import datetime
import platform
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import chaoslib
from chaoslib import substitute
from chaoslib.rollback import run_rollbacks
from chaoslib.run import Runner
from chaoslib.types import Strategy

import gameday
from gameday import paths
from gameday.engine import session as sessions
from gameday.engine import stops
from gameday.engine.judge import Verdict, judge
from gameday.engine.progress import ProgressPrinter
from gameday.engine.selfguard import refuse_self_signal
from gameday.errors import InvalidInput, TargetUnavailable
from gameday.evidence.journal import JournalExists, write_journal
from gameday.evidence.journal_shape import EnvironmentJSON, GamedaySection
from gameday.evidence.redaction import experiment_secrets, scrub
from gameday.experiment.loader import LoadedExperiment, load_experiment
from gameday.kinds import by_activity
from gameday.safety import signals, targetconfig
from gameday.safety.halt import refuse_if_halted
from gameday.safety.locks import target_key
from gameday.safety.stop_conditions import StopOnSpec
from gameday.targets.base import (
    GpuRef,
    Target,
    loaded_configuration,
    run_configuration,
    target_settings,
)
from gameday.targets.open import open_target

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from gameday.engine.plan import Plan

CONTROL = {"name": "gameday", "provider": {"type": "python", "module": "gameday.controls"}}
SETTINGS = {"runtime": {"rollbacks": {"strategy": "always"}}}


@dataclass
class RunOptions:
    path: Path
    target: str | None = None
    journal_path: Path | None = None
    variables: dict[str, str] = field(default_factory=dict)
    dry_run: bool = False
    lab_dir: Path = field(default_factory=paths.lab_dir)
    out: TextIO = field(default_factory=lambda: sys.stdout)  # as it is when the run starts
    target_config: Path | None = None  # else $GAMEDAY_TARGET_CONFIG
    sign_key: Path | None = None
    render_plan: bool = True  # a dry run prints its plan (not for --output json)
    stop_on: StopOnSpec | None = None  # a playbook's stop conditions, with the experiment's
    # what to show of the outcome once the run ends, before the lab it started (if any)
    # stops: the verdict comes before "stopping the lab"
    show: "Callable[[RunOutcome], None] | None" = None


@dataclass
class PlannedFault:
    activity: str
    kind: str
    gpus: list[GpuRef]
    injected_at: str
    lease_s: float

    def line(self) -> str:
        where = ", ".join(g.label() for g in self.gpus) or "what its selector picks"
        return (f"  {self.activity}: {self.kind} on {where} (injected_at={self.injected_at}, "
                f"lease {self.lease_s:g} s)")


@dataclass
class RunOutcome:
    """What a run ended with: its exit code and, once it ran, its journal and verdict."""

    exit_code: int
    journal_path: Path | None = None
    verdict: Verdict | None = None
    journal: dict[str, Any] | None = None
    plan: "Plan | None" = None  # a dry run's


def parse_vars(pairs: list[str]) -> dict[str, str]:
    values: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise InvalidInput(f"--var must be KEY=VALUE, got {pair!r}", path="--var")
        values[key] = value
    return values


def plan_faults(loaded: LoadedExperiment, target: Target | None,
                session: sessions.Session,
                variables: dict[str, str] | None = None) -> list[PlannedFault]:
    """Resolve every fault action's targets and check the blast radius; inject nothing.
    The self-guard sees each action's arguments as the action will (``${name}``
    substituted from the configuration and ``variables``)."""
    planned: list[PlannedFault] = []
    configuration = loaded_configuration(loaded.experiment, target, variables or {})
    for position, activity in enumerate(loaded.experiment.get("method") or []):
        provider = activity.get("provider") or {}
        kind = by_activity(str(provider.get("module")), str(provider.get("func")))
        if kind is None or activity.get("type") != "action":
            continue
        where = f"method[{position}].provider.arguments"
        arguments = provider.get("arguments") or {}
        gpus: list[GpuRef] = []
        if target is None:
            raise InvalidInput(f"fault {kind.name} needs a target (use --target lab or set "
                               "extensions[gameday].target)", file=str(loaded.path),
                               path=f"method[{position}]",
                               line=loaded.line_of(f"method[{position}]"))
        refuse_self_signal(kind.name, dict(substitute(dict(arguments), configuration, {})),
                           target, f"{loaded.path}: method[{position}] "
                           f"{activity.get('name')!r}")
        if kind.selector == "gpu":
            try:
                gpus = target.resolve_gpus(arguments.get("gpu") or {}, where=f"{where}.gpu")
            except (InvalidInput, TargetUnavailable) as exc:
                path = getattr(exc, "path", None) or f"{where}.gpu"
                raise InvalidInput(str(exc).split(": ", 1)[-1] if path in str(exc) else str(exc),
                                   file=str(loaded.path), path=path,
                                   line=loaded.line_of(f"{where}.gpu")) from None
        planned.append(PlannedFault(
            activity=str(activity.get("name")), kind=kind.name, gpus=gpus,
            injected_at=kind.injected_at.get(target.kind, "?"),
            lease_s=float(arguments.get("lease_s") or session.extension.lease_s)))
    try:
        session.blast_radius.check_gpus([g for p in planned for g in p.gpus])
    except InvalidInput as exc:
        raise InvalidInput(str(exc), file=str(loaded.path), path="extensions.gameday.blast_radius",
                           line=loaded.line_of("extensions")) from None
    return planned


def _default_journal_path(experiment_path: Path, run_id: str) -> Path:
    """``$GAMEDAY_JOURNALS/<UTC stamp>-<experiment>-<run id>.json``: unique per run."""
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    slug = re.sub(r"[^a-z0-9-]+", "-", experiment_path.stem.lower()).strip("-") or "experiment"
    return paths.journals_dir() / f"{stamp}-{slug}-{run_id}.json"


def _environment() -> EnvironmentJSON:
    return {"host": platform.node(), "python": platform.python_version(),
            "gameday": gameday.__version__, "chaoslib": chaoslib.__version__,
            "argv": sys.argv}


def preview(options: RunOptions) -> "Plan":
    """The plan of a run (``--dry-run``, ``gameday plan``): read-only, it starts no lab,
    injects nothing and takes no lock (:func:`gameday.engine.plan.plan`)."""
    from gameday.engine.plan import plan  # loaded by dry runs only

    loaded = with_stop_on(load_experiment(options.path, options.variables), options.stop_on)
    config = targetconfig.from_environment(options.target_config)
    kind = options.target or loaded.extension.target or "none"
    return plan(loaded, kind=kind, variables=options.variables, target_config=config,
                lab_dir=options.lab_dir)


def with_stop_on(loaded: LoadedExperiment, extra: StopOnSpec | None) -> LoadedExperiment:
    """``loaded`` whose extension also stops on ``extra`` (a playbook's conditions): its
    own when it has none, else both lists of alerts (one Alertmanager per run:
    :class:`InvalidInput` when they name two)."""
    own = loaded.extension.stop_on
    if extra is None:
        return loaded
    if own is not None and own.alertmanager != extra.alertmanager:
        raise InvalidInput(f"{loaded.path}: stop_on watches {own.alertmanager}, the "
                           f"playbook's {extra.alertmanager}: one Alertmanager per run")
    merged = extra if own is None else dataclasses.replace(
        own, alerts=own.alerts + extra.alerts, interval_s=min(own.interval_s, extra.interval_s))
    return dataclasses.replace(loaded, extension=dataclasses.replace(loaded.extension,
                                                                     stop_on=merged))


def run(options: RunOptions) -> RunOutcome:
    """Run one experiment file; return its exit code (and journal path). A dry run
    renders :func:`preview` and returns its exit code."""
    if options.dry_run:
        from gameday.engine.plan import render

        planned_run = preview(options)
        if options.render_plan:
            render(planned_run, options.out)
        return RunOutcome(planned_run.exit_code, plan=planned_run)
    loaded = with_stop_on(load_experiment(options.path, options.variables), options.stop_on)
    config = targetconfig.from_environment(options.target_config)
    sign_key = None
    if options.sign_key:
        from gameday.evidence import signing  # cryptography loads only for signed runs

        sign_key = signing.load_private(options.sign_key)
    kind = options.target or loaded.extension.target or "none"
    if options.journal_path is not None and options.journal_path.exists():
        raise JournalExists(f"--journal-path {options.journal_path} already exists; journals "
                            "are never replaced")
    signals.reset()
    signals.install()
    stops.reset()
    stops.install()
    lab_lease = None
    if kind == "lab":  # the lab's code loads only for runs on the lab
        from gameday.targets.lab import LabLease

        lab_lease = LabLease(options.lab_dir,
                             lambda line: print(line, file=options.out, flush=True))
    session: sessions.Session | None = None
    try:
        if lab_lease is not None:
            lab_lease.ensure()
        target = open_target(kind, target_settings(loaded.experiment, options.variables),
                             lab_dir=options.lab_dir)
        if target is not None:  # refused here, before anything is injected, while halted
            refuse_if_halted(target.agents)
        session = sessions.Session(target=target, extension=loaded.extension,
                                   ledger_path=paths.ledger_path(), target_config=config)
        planned = plan_faults(loaded, target, session, dict(options.variables))
        for item in planned:  # refused here, before anything is injected, if another run
            for gpu in item.gpus:  # holds one of the targets
                session.locks.acquire(target_key(gpu.node, {"gpu": gpu.index}))
        _print_plan(kind, planned, session, options.out)
        session.hold_silence()  # refused here, before anything is injected, if it cannot
        outcome = _execute(loaded, target, session, kind, options, sign_key)
        if options.show is not None:
            options.show(outcome)
        return outcome
    except signals.Interrupted as interrupted:
        print(f"gameday: {interrupted}; nothing left injected", file=sys.stderr)
        return RunOutcome(interrupted.exit_code)
    finally:
        with signals.deferred():
            if session is not None:
                session.locks.release_all()
            if lab_lease is not None:
                lab_lease.release()


def _print_plan(kind: str, planned: list[PlannedFault], session: sessions.Session,
                out: TextIO) -> None:
    print(f"plan: target={kind}, {len(planned)} fault(s), run {session.run_id}", file=out)
    for item in planned:
        print(item.line(), file=out)
    config = session.target_config
    if config.allowed_nodes is not None:
        print(f"  allowlist ({config.source}): nodes {', '.join(sorted(config.allowed_nodes))}",
              file=out)
    for guard in session.extension.safeguards:
        bounds = ", ".join(f"{name} {value:g}" for name, value in
                           (("min", guard.min), ("max", guard.max), ("equals", guard.equals))
                           if value is not None)
        source = f"promql {guard.promql}" if guard.promql else f"http {guard.http}"
        print(f"  safeguard {guard.name}: {source} ({bounds}; every {guard.interval_s:g} s)",
              file=out)
    if session.extension.silence is not None:
        print(f"  {session.extension.silence.line()}; before the method, ending a lease "
              f"({session.extension.lease_s:g} s) ahead until the rollbacks", file=out)
    if session.extension.stop_on is not None:
        print(f"  {session.extension.stop_on.line()}", file=out)
    if session.locks.held():
        print(f"  locks: {', '.join(session.locks.held())}", file=out)


def _secrets(experiment: dict[str, Any], target: Target | None) -> set[str]:
    """Every secret this run knows: experiment secrets, secret config, agent tokens."""
    found = experiment_secrets(experiment)
    for client in (target.agents.values() if target else ()):
        token = getattr(client, "_token", None)  # the client keeps its bearer token private
        if isinstance(token, str):
            found.add(token)
    return found


def _execute(loaded: LoadedExperiment, target: Target | None, session: sessions.Session,
             kind: str, options: RunOptions,
             sign_key: "Ed25519PrivateKey | None" = None) -> RunOutcome:
    experiment = copy.deepcopy(loaded.experiment)
    experiment["configuration"] = run_configuration(experiment, target, options.variables)
    controls = experiment.setdefault("controls", [])
    if not any(c.get("provider", {}).get("module") == "gameday.controls" for c in controls):
        controls.append(copy.deepcopy(CONTROL))
    printer = ProgressPrinter(options.out)
    error: str | None = None
    journal: dict[str, Any] | None = None
    sessions.activate(session)
    try:
        runner = Runner(Strategy.DEFAULT)
        runner.register_event_handler(printer)
        journal = runner.run(experiment, settings=copy.deepcopy(SETTINGS))
    except signals.Interrupted:
        journal = printer.journal
    except Exception as exc:  # the toolkit let an exception escape (fix 5)
        journal = printer.journal
        error = f"the run stopped on an error: {type(exc).__name__}: {exc}"
        print(f"gameday: {error}; rolling back", file=options.out)
        with signals.deferred():
            try:
                runs = list(run_rollbacks(experiment, experiment["configuration"], {}, None,
                                          None))
                if journal is not None:
                    journal["rollbacks"] = [run for run in runs if isinstance(run, dict)]
            except Exception as rollback_exc:
                error += f"; rollbacks raised {rollback_exc}"
    finally:
        with signals.deferred():  # each revert records why: the run ended, or its signal
            failures = session.close(printer.interruption()
                                     if signals.STATE.received is not None else "run-ended")
        sessions.deactivate()
    journal = journal or {"status": "failed", "experiment": experiment, "run": []}
    if error:
        journal["status"] = "failed"
    if session.breach:
        error = f"{error}; {session.breach}" if error else session.breach
    verdict = judge(journal, signal_exit=signals.STATE.exit_code, error=error,
                    revert_failures=failures, refused=session.refused,
                    interruption=printer.interruption()
                    if signals.STATE.received is not None else None)
    if verdict.status == "interrupted":
        journal["status"] = "interrupted"
    section: GamedaySection = {
        "version": 1, "run_id": session.run_id, "target": kind,
        "target_source": target.source if target else None,
        "experiment_file": str(options.path),
        "extension": {"coverage": dict(loaded.extension.coverage),
                      "slo": vars(loaded.extension.slo),
                      "blast_radius": vars(loaded.extension.blast_radius),
                      "lease_s": loaded.extension.lease_s,
                      "safeguards": [vars(s) for s in loaded.extension.safeguards],
                      "stop_on": None if loaded.extension.stop_on is None
                      else loaded.extension.stop_on.line()},
        "target_config": session.target_config.source or None,
        "faults": [entry.to_json() for entry in session.ledger],
        "verifiers": [result.to_json() for result in session.results],
        "timeline": [event.to_json() for event in session.timeline],
        "sli": session.recorder.to_json() if session.recorder else None,
        "verdict": verdict.to_json(),
        "environment": _environment(),
    }
    journal["gameday"] = section
    journal_path = options.journal_path or _default_journal_path(options.path, session.run_id)
    journal = scrub(journal, _secrets(experiment, target))
    with signals.deferred():
        try:
            write_journal(journal_path, journal, sign_key)
        except JournalExists:  # appeared during the run: kept, this one written beside it
            kept = journal_path
            journal_path = kept.with_name(f"{kept.stem}-{session.run_id}{kept.suffix}")
            write_journal(journal_path, journal, sign_key)
            print(f"gameday: {kept} appeared during the run and is kept; this run's "
                  f"journal is {journal_path.name}", file=sys.stderr)
    return RunOutcome(verdict.exit_code, journal_path, verdict, journal)
