"""The verdict tables the CLI prints at the end of ``gameday run`` and ``gameday play`` (rich).

On a terminal the tables are drawn with rich, colour-coded by verdict; into a pipe or
a file the verdict table is the same rows as aligned plain text, so logs stay greppable.
"""

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from gameday.contract.gpus import gpu_label
from gameday.evidence.journal_shape import gameday_section
from gameday.report.timeline import verifier_phases
from gameday.stats import plural

if TYPE_CHECKING:
    from rich.console import Console

PIPE_WIDTH = 240
_STYLES = {"PASS": "green", "PASSED": "bold green", "ok": "green", "FAIL": "red",
           "FAILED": "bold red", "ACTIVE": "bold red", "INTERRUPTED": "bold yellow",
           "info": "dim", "passed": "green", "failed": "red", "error": "bold red",
           "skipped": "dim", "interrupted": "bold yellow"}


def _fmt_time(t: float | None, origin: float | None) -> str:
    if t is None:
        return "-"
    return f"+{t - origin:.2f}s" if origin else f"{t:.2f}"


def _verifier_row(result: Mapping[str, Any], phase: str) -> tuple[str, str, str]:
    m = result.get("measurement") or {}
    name = result.get("name") or result.get("verifier", "")
    if result.get("name") and result.get("verifier"):
        name = f"{result['name']} ({result['verifier']})"
    if phase:
        name = f"{phase}: {name}"
    verdict = {True: "PASS", False: "FAIL", None: "info"}[result.get("passed")]
    detail = result.get("reason") or ""
    if not detail:
        if "rto_s" in m:
            slo = m.get("slo_s")
            detail = f"RTO {m['rto_s']:.2f} s" + (f" (SLO {slo:g} s)" if slo else "")
        elif "digest" in m:
            detail = f"sha256 {str(m['digest'])[:16]}…"
    return name, verdict, detail


def verdict_table(journal: dict[str, Any]) -> list[tuple[str, str, str]]:
    """Rows of (what, verdict, detail) for a journal with its gameday section; a
    steady-state probe's result is named with its check, "before: ..." or "after: ..."."""
    gd = gameday_section(journal)
    rows: list[tuple[str, str, str]] = []
    states = journal.get("steady_states") or {}
    for phase in ("before", "after"):
        state = states.get(phase)
        if state is not None:
            met = state.get("steady_state_met")
            probes = len(state.get("probes") or [])
            rows.append((f"steady state {phase}", "PASS" if met else "FAIL",
                         plural(probes, "probe")))
    onset = min((f["applied_at"] for f in gd.get("faults") or [] if f.get("applied_at")),
                default=None)
    for fault in gd.get("faults") or []:
        where = gpu_label(fault.get("node"), fault["target"]["gpu"]) if "gpu" in fault.get(
            "target", {}) else fault.get("node", "")
        reverted = fault.get("reverted_at")
        detail = (f"{where} injected_at={fault.get('injected_at')} "
                  f"applied {_fmt_time(fault.get('applied_at'), onset)} "
                  f"reverted {_fmt_time(reverted, onset)} ({fault.get('revert_reason') or '-'})")
        rows.append((f"fault {fault.get('kind')}", "ok" if reverted else "ACTIVE", detail))
    results = gd.get("verifiers") or []
    for result, phase in zip(results, verifier_phases(journal), strict=True):
        rows.append(_verifier_row(result, phase))
    verdict: Mapping[str, Any] = gd.get("verdict") or {}
    rows.append(("run", "PASSED" if verdict.get("passed") else str(verdict.get("status",
                                                                            "")).upper(),
                 "; ".join(verdict.get("reasons") or []) or f"exit {verdict.get('exit_code')}"))
    return rows


def console_for(out: TextIO) -> "Console":
    """A rich console on ``out``: live width on a terminal, wide and plain in a pipe."""
    from rich.console import Console  # rich loads only when a table is drawn

    terminal = out.isatty() if hasattr(out, "isatty") else False
    return Console(file=out, highlight=False, width=None if terminal else PIPE_WIDTH,
                   no_color=not terminal, force_terminal=terminal)


def _verdict_cell(verdict: str) -> str:
    style = _STYLES.get(verdict)
    return f"[{style}]{verdict}[/]" if style else verdict


def print_verdict(journal: dict[str, Any], out: TextIO) -> None:
    """The run's verdict table: steady states, faults, verifiers, overall.

    A rich table on a terminal; aligned plain columns (same rows) into a pipe or file.
    """
    rows = verdict_table(journal)
    if not (hasattr(out, "isatty") and out.isatty()):
        width = max(len("check"), *(len(r[0]) for r in rows))
        shown = max(len("verdict"), *(len(r[1]) for r in rows))
        print("", file=out)
        print(f"{'check'.ljust(width)}  {'verdict'.ljust(shown)}  detail", file=out)
        print(f"{'-' * width}  {'-' * shown}  ------", file=out)
        for what, verdict, detail in rows:
            print(f"{what.ljust(width)}  {verdict.ljust(shown)}  {detail}".rstrip(), file=out)
        return
    from rich import box
    from rich.table import Table
    from rich.text import Text

    table = Table("check", "verdict", "detail", box=box.SIMPLE_HEAD, pad_edge=False)
    for what, verdict, detail in rows:
        table.add_row(Text(what), _verdict_cell(verdict), Text(detail))
    console = console_for(out)
    console.print()
    console.print(table)


def print_run(journal: dict[str, Any] | None, journal_path: Path | None, out: TextIO,
              report_path: Path | None = None) -> None:
    """What ``gameday run`` shows when a run ends: its verdict table, its journal's path
    and its HTML report's (``report_path``, written by ``run --html``), else the
    ``gameday report`` command that renders it (nothing for a run that wrote no journal:
    a dry run, an interrupted plan)."""
    if journal is None:
        return
    print_verdict(journal, out)
    print(f"journal: {journal_path}", file=out)
    if report_path is not None:
        print(f"report:  {report_path.absolute()}", file=out)
    elif journal_path is not None:
        print(f"report:  gameday report {shlex.quote(str(journal_path))}", file=out)


@dataclass(frozen=True)
class PlaybookRow:
    """One experiment of a game day as its table shows it."""

    experiment: str
    expect: str
    outcome: str
    as_expected: bool
    rto_s: float | None
    evidence: str  # as shown: the journal's sha256 (a prefix), else why there is none


def print_playbook(title: str, rows: Sequence[PlaybookRow], console: "Console", *,
                   at_scale: str | None, exit_code: int, interrupted: bool,
                   record_path: Path | None, verdict_line: bool = True) -> None:
    """One row per experiment of a game day: expected vs actual, RTO, journal hash; then
    the cost projected at scale (``at_scale``, computed by the caller) and, unless a caller
    such as the gate prints a verdict of its own, the game day's verdict."""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    table = Table("experiment", "expect", "outcome", "as expected", "RTO", "journal sha256",
                  title=f"playbook: {title}", box=box.SIMPLE_HEAD)
    for row in rows:
        table.add_row(Text(row.experiment), row.expect, _verdict_cell(row.outcome),
                      "yes" if row.as_expected else "[bold red]NO[/]",
                      "-" if row.rto_s is None else f"{row.rto_s:.2f} s",
                      Text(row.evidence or "-"))
    console.print()
    console.print(table)
    if at_scale is not None:
        console.print(f"at scale: {at_scale}", markup=False)
    if not verdict_line:
        return
    verdict = "PASSED" if exit_code == 0 else ("INTERRUPTED" if interrupted else "FAILED")
    console.print(Text.assemble("game day: ", Text(verdict, style=_STYLES.get(verdict, "")),
                                f" (exit {exit_code}); record {record_path}"))
