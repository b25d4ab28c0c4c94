"""The verdict tables printed at the end of ``gameday run`` and ``gameday play`` (rich).

On a terminal the tables are drawn with rich, colour-coded by verdict; into a pipe or
a file the verdict table is the same rows as aligned plain text, so logs stay greppable.
"""

from typing import TYPE_CHECKING, Any, TextIO

from gameday.targets import gpu_label

if TYPE_CHECKING:
    from rich.console import Console

    from gameday.gamedays.play import PlaybookRun

PIPE_WIDTH = 240
_STYLES = {"PASS": "green", "PASSED": "bold green", "ok": "green", "FAIL": "red",
           "FAILED": "bold red", "ACTIVE": "bold red", "INTERRUPTED": "bold yellow",
           "info": "dim", "passed": "green", "failed": "red", "error": "bold red",
           "skipped": "dim", "interrupted": "bold yellow"}


def _fmt_time(t: float | None, origin: float | None) -> str:
    if t is None:
        return "-"
    return f"+{t - origin:.2f}s" if origin else f"{t:.2f}"


def _verifier_row(result: dict[str, Any]) -> tuple[str, str, str]:
    m = result.get("measurement") or {}
    name = result.get("name") or result.get("verifier", "")
    if result.get("name") and result.get("verifier"):
        name = f"{result['name']} ({result['verifier']})"
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
    """Rows of (what, verdict, detail) for a journal with its gameday section."""
    gd = journal.get("gameday") or {}
    rows: list[tuple[str, str, str]] = []
    states = journal.get("steady_states") or {}
    for phase in ("before", "after"):
        state = states.get(phase)
        if state is not None:
            met = state.get("steady_state_met")
            probes = len(state.get("probes") or [])
            rows.append((f"steady state {phase}", "PASS" if met else "FAIL", f"{probes} probes"))
    onset = min((f["applied_at"] for f in gd.get("faults") or []), default=None)
    for fault in gd.get("faults") or []:
        where = gpu_label(fault.get("node"), fault["target"]["gpu"]) if "gpu" in fault.get(
            "target", {}) else fault.get("node", "")
        reverted = fault.get("reverted_at")
        detail = (f"{where} injected_at={fault.get('injected_at')} "
                  f"applied {_fmt_time(fault.get('applied_at'), onset)} "
                  f"reverted {_fmt_time(reverted, onset)} ({fault.get('revert_reason') or '-'})")
        rows.append((f"fault {fault.get('kind')}", "ok" if reverted else "ACTIVE", detail))
    for result in gd.get("verifiers") or []:
        rows.append(_verifier_row(result))
    verdict = gd.get("verdict") or {}
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
        width = max(len(r[0]) for r in rows)
        print("", file=out)
        print(f"{'check'.ljust(width)}  verdict  detail", file=out)
        print(f"{'-' * width}  -------  ------", file=out)
        for what, verdict, detail in rows:
            print(f"{what.ljust(width)}  {verdict.ljust(7)}  {detail}", file=out)
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


def print_playbook(result: "PlaybookRun", console: "Console") -> None:
    """One row per experiment of a game day: expected vs actual, RTO, journal hash."""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    from gameday.gamedays.gate import projections

    table = Table("experiment", "expect", "outcome", "as expected", "RTO", "journal sha256",
                  title=f"playbook: {result.playbook.title}", box=box.SIMPLE_HEAD)
    for run in result.runs:
        summary = run.summary
        rto = summary.rto_s if summary else None
        table.add_row(Text(run.planned.name), run.planned.expect, _verdict_cell(run.outcome),
                      "yes" if run.as_expected else "[bold red]NO[/]",
                      "-" if rto is None else f"{rto:.2f} s",
                      Text(summary.sha256[:16] if summary else (run.error[:60] or "-")))
    console.print()
    console.print(table)
    worst, _ = projections(result.playbook, result.runs)
    if worst is not None:
        console.print(f"at scale: {worst.line()}", markup=False)
    verdict = "PASSED" if result.exit_code == 0 else (
        "INTERRUPTED" if result.interrupted_exit else "FAILED")
    console.print(Text.assemble("game day: ", Text(verdict, style=_STYLES.get(verdict, "")),
                                f" (exit {result.exit_code}); record {result.record_path}"))
