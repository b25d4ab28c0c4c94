"""``gameday report RECORD.playbook.json``: a whole game day as one page, HTML or Markdown.

The record ``gameday play`` and ``gameday gate`` write lists every experiment of the
playbook with its journal; this report reads each journal (its summary) and shows the
game day as a room of people reads it: the verdict, one row per experiment (expected vs
actual, RTO and RPO against their SLOs, a link to that run's own report and its journal
hash), the RTO and RPO of every run against their objectives (inline SVG), and what the
worst and the median RTO would cost at scale. Like the run report, the HTML page is
self-contained: no script, nothing fetched.
"""

import datetime
import html
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gameday.errors import InvalidInput
from gameday.evidence.summary import JournalSummary, read_summary, run_page
from gameday.gamedays.costs import Fleet, no_projection, project
from gameday.report.document import CSP, STYLE
from gameday.report.svg import objectives_svg
from gameday.report.timeline import Objective
from gameday.stats import percentile

__all__ = ["PlaybookReport", "is_playbook_record", "read_record", "render_html",
           "render_markdown"]

RECORD_SUFFIX = ".playbook.json"


def is_playbook_record(path: Path) -> bool:
    return path.name.endswith(RECORD_SUFFIX)


@dataclass
class Row:
    """One experiment of the game day."""

    name: str
    expect: str
    outcome: str
    as_expected: bool
    journal: Path | None
    summary: JournalSummary | None
    error: str

    @property
    def linked(self) -> Path | None:
        """What the page links for this run: its own report when it was rendered beside
        its journal, else the journal (:func:`run_page`)."""
        return run_page(self.journal) if self.journal else None

    @property
    def link_label(self) -> str:
        linked = self.linked
        if linked is None:
            return ""
        return f"{linked.name} ({'run report' if linked.suffix == '.html' else 'journal'})"


@dataclass
class PlaybookReport:
    title: str
    playbook: str
    started_at: float
    ended_at: float
    exit_code: int
    draw: dict[str, Any] | None
    rows: list[Row]
    #: the fleet the playbook said it stands for (None: it said none)
    fleet: Fleet | None = None

    @property
    def passed(self) -> bool:
        return self.exit_code == 0

    def rtos(self) -> list[float]:
        return [r.summary.rto_s for r in self.rows if r.summary and r.summary.rto_s is not None]


def _journal_of(record_dir: Path, value: Any) -> Path | None:
    if not value:
        return None
    path = Path(str(value))
    if path.exists():
        return path
    beside = record_dir / path.name  # the record was moved with its journals
    return beside if beside.exists() else None


def read_record(path: Path) -> PlaybookReport:
    """Read a playbook run record and the summary of every journal it names."""
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InvalidInput(f"cannot read: {exc.strerror}", file=str(path)) from None
    except ValueError as exc:
        raise InvalidInput(f"not a JSON playbook record: {exc}", file=str(path)) from None
    if not isinstance(record, dict) or not isinstance(record.get("runs"), list):
        raise InvalidInput("not a playbook record (no runs list)", file=str(path))
    rows = []
    for position, run in enumerate(record["runs"]):
        if not isinstance(run, dict):
            raise InvalidInput("must be a mapping", file=str(path), path=f"runs[{position}]")
        journal = _journal_of(path.parent, run.get("journal"))
        summary = read_summary(journal) if journal else None
        rows.append(Row(name=str(run.get("name") or ""), expect=str(run.get("expect") or "pass"),
                        outcome=str(run.get("outcome") or "error"),
                        as_expected=bool(run.get("as_expected")), journal=journal,
                        summary=summary, error=str(run.get("error") or "")))
    return PlaybookReport(title=str(record.get("title") or ""),
                          playbook=str(record.get("playbook") or ""),
                          started_at=float(record.get("started_at") or 0),
                          ended_at=float(record.get("ended_at") or 0),
                          exit_code=int(record.get("exit_code") or 0),
                          draw=record.get("draw") if isinstance(record.get("draw"), dict)
                          else None, rows=rows, fleet=Fleet.from_json(record.get("fleet")))


def _when(epoch: float) -> str:
    return (datetime.datetime.fromtimestamp(epoch, datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
            if epoch else "-")


def _seconds(value: float | None, slo: float | None = None) -> str:
    if value is None:
        return "-"
    return f"{value:.2f} s" + (f" (SLO {slo:g} s)" if slo is not None else "")


def _objectives(report: PlaybookReport) -> list[Objective]:
    found = []
    for row in report.rows:
        summary = row.summary
        if summary is None:
            continue
        if summary.rto_s is not None:
            found.append(Objective(f"{row.name}: RTO", summary.rto_s, summary.rto_slo_s, "s"))
        if summary.rpo_steps is not None:
            found.append(Objective(f"{row.name}: RPO", summary.rpo_steps, None, "steps"))
        if summary.slowdown_pct is not None:  # each run's bar: the game day's curve
            found.append(Objective(f"{row.name}: slowdown", summary.slowdown_pct,
                                   summary.slowdown_objective_pct, "%"))
    return found


def _at_scale(report: PlaybookReport, fleet: Fleet) -> list[tuple[str, str]]:
    rtos = report.rtos()
    if not rtos or no_projection(fleet):
        return []
    rpo = max((r.summary.rpo_s or 0.0 for r in report.rows if r.summary), default=0.0)
    lines = []
    for label, rto in (("worst RTO", max(rtos)), ("median RTO", percentile(rtos, 0.5))):
        lines.append((f"{label} {rto:.2f} s", project(rto, rpo, fleet).line()))
    return lines


def render_html(report: PlaybookReport, fleet: Fleet | None = None) -> str:
    fleet = fleet or report.fleet or Fleet()
    esc = html.escape
    badge = ("<span class='badge ok'>PASSED</span>" if report.passed else
             "<span class='badge bad'>FAILED</span>")
    draw = (f"; drawn from {esc(str(report.draw.get('mix')))} (seed "
            f"{esc(str(report.draw.get('seed')))})" if report.draw else "")
    rows = []
    for row in report.rows:
        s = row.summary
        link = (f"<a href='{esc(row.linked.name)}'>{esc(row.link_label)}</a>"
                if row.linked else esc(row.error or "-"))
        sha = f"<br><code>{s.sha256}</code>" if s else ""
        verdict = "v-ok" if row.as_expected else "v-FAILED"
        rows.append(
            f"<tr><td>{esc(row.name)}</td><td>{esc(row.expect)}</td>"
            f"<td class='{verdict}'>{esc(row.outcome)}</td>"
            f"<td>{'yes' if row.as_expected else 'NO'}</td>"
            f"<td>{_seconds(s.rto_s if s else None, s.rto_slo_s if s else None)}</td>"
            f"<td>{'-' if not s or s.rpo_steps is None else f'{s.rpo_steps:g} steps'}</td>"
            f"<td>{link}{sha}</td></tr>")
    scale = _at_scale(report, fleet)
    unprojected = no_projection(fleet) if report.rtos() else None
    scale_html = (f"<h2>At scale</h2><p class='muted'>{esc(unprojected)}.</p>" if unprojected
                  else "" if not scale else
                  "<h2>At scale</h2><table class='facts'>"
                  + "".join(f"<tr><td>{esc(k)}</td><td>{esc(v)}</td></tr>" for k, v in scale)
                  + f"</table><p class='muted'>{esc(fleet.assumptions())}.</p>")
    return "".join([
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>",
        f"<meta http-equiv='Content-Security-Policy' content=\"{CSP}\">",
        f"<title>{esc(report.title)} — gameday game day</title><style>{STYLE}</style></head>",
        f"<body><main><h1>{esc(report.title)}{badge}</h1>",
        f"<p class='muted'>Game day {_when(report.started_at)} to {_when(report.ended_at)}; "
        f"playbook {esc(report.playbook)}{draw}; exit {report.exit_code}.</p>",
        "<h2>Experiments</h2><table><tr><th>experiment</th><th>expect</th><th>outcome</th>"
        "<th>as expected</th><th>RTO</th><th>RPO</th><th>run report (or journal), journal "
        "sha256</th></tr>",
        "".join(rows), "</table>",
        "<h2>Recovery and slowdown against objectives</h2>", objectives_svg(_objectives(report)),
        scale_html, "</main></body></html>\n"])


def render_markdown(report: PlaybookReport, fleet: Fleet | None = None) -> str:
    fleet = fleet or report.fleet or Fleet()
    lines = [f"# {report.title}: {'PASSED' if report.passed else 'FAILED'}", "",
             f"Game day {_when(report.started_at)} to {_when(report.ended_at)}; playbook "
             f"`{report.playbook}`; exit {report.exit_code}.", "",
             "| experiment | expect | outcome | as expected | RTO | RPO | run report | sha256 |",
             "|---|---|---|---|---|---|---|---|"]
    for row in report.rows:
        s = row.summary
        link = f"[{row.link_label}]({row.linked.name})" if row.linked else row.error or "-"
        lines.append(
            f"| {row.name} | {row.expect} | {row.outcome} | "
            f"{'yes' if row.as_expected else '**NO**'} | "
            f"{_seconds(s.rto_s if s else None, s.rto_slo_s if s else None)} | "
            f"{'-' if not s or s.rpo_steps is None else f'{s.rpo_steps:g} steps'} | {link} | "
            f"`{s.sha256[:16] if s else '-'}` |")
    scale = _at_scale(report, fleet)
    if scale:
        lines += ["", f"At scale ({fleet.gpus:,} GPUs):", ""]
        lines += [f"- {label}: {line}" for label, line in scale]
        lines += ["", f"{fleet.assumptions()}."]
    elif report.rtos() and (unprojected := no_projection(fleet)):
        lines += ["", f"{unprojected}."]
    return "\n".join(lines) + "\n"
