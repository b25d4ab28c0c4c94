"""``gameday play``: run a playbook's experiments in order, with a live progress display.

Each experiment runs through ``gameday.engine.runner.run`` exactly as ``gameday run`` would
(same guarantees: rollbacks always, signals roll back, a journal per run). The
journals go to one directory per game day (hash-chained), next to a run record
``<stamp>-<playbook>.playbook.json`` that lists what ran, what was expected, what
happened and each journal's SHA-256. The record is written last and joins the same
hash chain (``gameday audit verify DIR`` covers it), so the expectations a gate judged
against are evidence too.

When any experiment targets the lab and none is running, the lab is started once for
the whole playbook and stopped at the end. The live progress goes to the console the
caller gives; what each run and the whole game day ended with is the caller's to print
(``show_run``, and the returned :class:`PlaybookRun`).
"""

import datetime
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO, cast

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

from gameday import paths
from gameday.engine import stops
from gameday.engine.runner import RunOptions, RunOutcome, run
from gameday.errors import GamedayError
from gameday.evidence.journal import write_journal
from gameday.evidence.summary import JournalSummary, read_journal
from gameday.experiment.loader import load_experiment
from gameday.gamedays.playbook import PlannedExperiment, Playbook
from gameday.safety import signals
from gameday.safety.halt import FleetHalted
from gameday.stats import plural
from gameday.targets.lab import LabLease

RECORD_SUFFIX = ".playbook.json"
EXIT_PASSED, EXIT_FAILED = 0, 1


@dataclass
class ExperimentRun:
    """What happened to one planned experiment."""

    planned: PlannedExperiment
    exit_code: int | None = None  # None: skipped
    journal_path: Path | None = None
    summary: JournalSummary | None = None
    error: str = ""

    @property
    def outcome(self) -> str:
        """passed | failed | error (bad input, no journal) | skipped | interrupted"""
        if self.exit_code is None:
            return "skipped"
        if self.exit_code > 128:
            return "interrupted"
        if self.summary is None:
            return "error"
        return "passed" if self.summary.passed else "failed"

    @property
    def as_expected(self) -> bool:
        return self.outcome == ("passed" if self.planned.expect == "pass" else "failed")

    def to_json(self) -> dict[str, Any]:
        return {"name": self.planned.name, "experiment": str(self.planned.path),
                "expect": self.planned.expect, "drawn_from": self.planned.drawn_from,
                "variables": dict(self.planned.variables), "exit_code": self.exit_code,
                "outcome": self.outcome, "as_expected": self.as_expected,
                "journal": str(self.journal_path) if self.journal_path else None,
                "sha256": self.summary.sha256 if self.summary else None, "error": self.error}


@dataclass
class PlaybookRun:
    playbook: Playbook
    journal_dir: Path
    runs: list[ExperimentRun] = field(default_factory=list)
    started_at: float = 0.0
    ended_at: float = 0.0
    interrupted_exit: int | None = None
    record_path: Path | None = None

    @property
    def exit_code(self) -> int:
        if self.interrupted_exit is not None:
            return self.interrupted_exit
        return EXIT_PASSED if all(r.as_expected for r in self.runs) else EXIT_FAILED

    def to_json(self) -> dict[str, Any]:
        pb = self.playbook
        return {"playbook": str(pb.path), "title": pb.title, "started_at": self.started_at,
                "ended_at": self.ended_at, "exit_code": self.exit_code,
                "on_failure": pb.on_failure,
                "draw": ({"mix": str(pb.draw.mix.path), "count": pb.draw.count,
                          "seed": pb.draw.seed} if pb.draw else None),
                "fleet": pb.fleet.to_json() if pb.fleet.stated else None,
                "runs": [r.to_json() for r in self.runs]}


class _ConsoleLines:
    """A text stream that prints the runner's lines above the live progress bar and
    shows the latest phase (``steady state before ...``) in the bar's description."""

    def __init__(self, console: Console, progress: Progress, task: TaskID) -> None:
        self.console = console
        self.progress = progress
        self.task = task
        self.experiment = ""
        self._buffer = ""

    def start(self, experiment: str) -> None:
        self.experiment = experiment
        self.progress.update(self.task, description=experiment)

    def write(self, text: str) -> int:
        self._buffer += text
        while "\n" in self._buffer:
            line, self._buffer = self._buffer.split("\n", 1)
            if line.strip():
                self.console.print(line, markup=False, highlight=False, soft_wrap=True)
            if line.startswith("[") and "] " in line:  # a progress line: "[  1.2s] phase"
                phase = line.split("] ", 1)[1].strip()
                self.progress.update(self.task, description=f"{self.experiment}: {phase[:60]}")
        return len(text)

    def flush(self) -> None:
        return None


def _stamp() -> str:
    """The UTC second and a random suffix: two plays started in one second differ."""
    return (datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
            + f"-{uuid.uuid4().hex[:8]}")


def _targets(playbook: Playbook, planned: list[PlannedExperiment]) -> set[str]:
    if playbook.target:
        return {playbook.target}
    return {load_experiment(p.path).extension.target or "none" for p in planned}


#: Shows what one run ended with (its verdict table), on the progress display's stream.
ShowRun = Callable[[RunOutcome, TextIO], None]


def play(playbook: Playbook, *, console: Console, show_run: ShowRun | None = None,
         journal_dir: Path | None = None, lab_dir: Path | None = None,
         on_summary: Callable[[JournalSummary], None] | None = None,
         sign_key: Path | None = None) -> PlaybookRun:
    """Run a loaded playbook with live progress on ``console``; return what happened (the
    record is written too). ``on_summary`` is given each experiment's journal summary as
    soon as it ran; with ``sign_key`` every journal and the record are signed."""
    from gameday.evidence import signing

    private = signing.load_private(sign_key) if sign_key else None  # bad key: nothing runs
    stamp = _stamp()
    directory = (journal_dir or paths.journals_dir() / f"{stamp}-{playbook.slug}").absolute()
    planned = playbook.plan()
    result = PlaybookRun(playbook, directory, [ExperimentRun(p) for p in planned])
    result.started_at = datetime.datetime.now(datetime.UTC).timestamp()
    lab = LabLease((lab_dir or paths.lab_dir()).absolute(),
                   lambda line: console.print(line, markup=False))
    console.print(f"playbook: {playbook.title} ({plural(len(planned), 'experiment')}, "
                  f"journals in {directory})", markup=False)
    for item in planned:
        origin = f"  [drawn: {item.drawn_from}]" if item.drawn_from else ""
        console.print(f"  {item.name}: {item.path.name} expect {item.expect}{origin}",
                      markup=False)
    if playbook.draw is not None:
        mix = playbook.draw.mix
        missing = ", ".join(f"{c.name} ({c.share:g}%)" for c in mix.uncovered())
        console.print(f"  drawn from {mix.title} (seed {playbook.draw.seed}); experiments "
                      f"cover {mix.covered_share():.1f}% of its interruptions"
                      + (f"; not rehearsed by this mix: {missing}" if missing else ""),
                      markup=False, soft_wrap=True)
    signals.reset()
    signals.install()
    progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                        MofNCompleteColumn(), TimeElapsedColumn(), console=console,
                        transient=False)
    try:
        if "lab" in _targets(playbook, planned):
            lab.ensure()
        with progress:
            overall = progress.add_task("experiments", total=len(planned))
            lines = _ConsoleLines(console, progress, overall)
            for position, entry in enumerate(result.runs):
                lines.start(f"{entry.planned.name} ({position + 1}/{len(planned)})")
                stopped = _run_one(entry, playbook, directory, position, lab.lab_dir, lines,
                                   stamp, show_run, sign_key)
                if on_summary is not None and entry.summary is not None:
                    on_summary(entry.summary)
                progress.advance(overall)
                if entry.outcome == "interrupted":
                    result.interrupted_exit = entry.exit_code
                    break
                if stopped is not None:
                    console.print(f"stopped: {stopped} — skipping the rest after "
                                  f"{entry.planned.name}", markup=False, soft_wrap=True)
                    break
                if not entry.as_expected and playbook.on_failure == "stop":
                    console.print(f"on_failure: stop — skipping the rest after "
                                  f"{entry.planned.name}", markup=False)
                    break
            progress.update(overall, description="game day finished")
    except signals.Interrupted as interrupted:
        result.interrupted_exit = interrupted.exit_code
    finally:
        with signals.deferred():
            lab.release()
            result.ended_at = datetime.datetime.now(datetime.UTC).timestamp()
            result.record_path = directory / f"{stamp}-{playbook.slug}{RECORD_SUFFIX}"
            write_journal(result.record_path, result.to_json(), private)
    return result


def _run_one(entry: ExperimentRun, playbook: Playbook, directory: Path, position: int,
             lab_dir: Path, lines: _ConsoleLines, stamp: str, show_run: ShowRun | None,
             sign_key: Path | None = None) -> str | None:
    """Run one experiment of the game day; why the game day must stop (the safety lever,
    a stop condition), else None."""
    journal_path = directory / f"{stamp}-{position + 1:02d}-{entry.planned.name}.json"
    options = RunOptions(path=entry.planned.path, target=playbook.target,
                         journal_path=journal_path, variables=dict(entry.planned.variables),
                         lab_dir=lab_dir, out=cast(TextIO, lines), sign_key=sign_key,
                         stop_on=playbook.stop_on)
    try:
        outcome = run(options)
    except GamedayError as exc:
        entry.exit_code, entry.error = exc.exit_code, str(exc)
        lines.write(f"gameday: {exc}\n")
        return str(exc) if isinstance(exc, FleetHalted) else None
    if show_run is not None:
        show_run(outcome, cast(TextIO, lines))
    entry.exit_code = outcome.exit_code
    if outcome.journal_path is not None and outcome.journal_path.exists():
        entry.journal_path = outcome.journal_path
        _, entry.summary = read_journal(outcome.journal_path)
    return stops.pending()

