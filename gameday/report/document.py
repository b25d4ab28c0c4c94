"""``gameday report``: one journal as a self-contained HTML page or as Markdown.

The HTML page has no script and fetches nothing: styles are inline, charts are inline
SVG, and a Content-Security-Policy of ``default-src 'none'`` (styles inline only) makes
the browser refuse any request the page might still try. It shows the SLI timeline
(fault windows shaded, RTO marked, alert and re-shard events), the verdict table (the
same rows as the terminal's), measurements against objectives, the faults, what the
measured RTO costs at scale, the environment and the journal's evidence hashes.
"""

import datetime
import html
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gameday.contract.gpus import gpu_label
from gameday.errors import InvalidInput
from gameday.evidence.journal_shape import gameday_section
from gameday.evidence.summary import JournalSummary, read_journal
from gameday.gamedays.costs import Fleet, no_projection, project
from gameday.report.svg import objectives_svg, timeline_svg
from gameday.report.terminal import verdict_table
from gameday.report.timeline import Timeline, build_timeline, number

FORMATS = ("html", "md")
SCALE_FLEETS = (1_024, 16_384, 131_072)
CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"

STYLE = """
:root{--ink:#1d2330;--mute:#5f6b7a;--line:#d5dae3;--ok:#2e7d32;--bad:#c62828}
body{font:15px/1.5 system-ui,-apple-system,'Segoe UI',sans-serif;color:var(--ink);
margin:0;background:#f6f7fa}main{max-width:1040px;margin:0 auto;padding:28px 32px 60px;
background:#fff;min-height:100vh}h1{font-size:24px;margin:0 0 6px}h2{font-size:18px;
margin:32px 0 10px;border-bottom:1px solid var(--line);padding-bottom:4px}
.badge{display:inline-block;padding:2px 10px;border-radius:12px;color:#fff;font-weight:600;
font-size:14px;vertical-align:middle;margin-left:8px}.badge.ok{background:var(--ok)}
.badge.bad{background:var(--bad)}.muted{color:var(--mute)}table{border-collapse:collapse;
width:100%;font-size:13.5px}th,td{text-align:left;padding:5px 8px;border-bottom:1px solid
var(--line);vertical-align:top}th{background:#f2f4f8;font-weight:600}
td.v-PASS,td.v-PASSED,td.v-ok{color:var(--ok);font-weight:600}
td.v-FAIL,td.v-FAILED,td.v-ACTIVE,td.v-INTERRUPTED{color:var(--bad);font-weight:700}
code{font-size:12.5px;background:#f2f4f8;padding:1px 4px;border-radius:3px}
.chart{display:block;border:1px solid var(--line);border-radius:6px;margin:8px 0}
.reasons li{color:var(--bad)}.facts td:first-child{width:190px;color:var(--mute)}
"""


def _when(epoch: float | None) -> str:
    if not epoch:
        return "-"
    return datetime.datetime.fromtimestamp(epoch, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _row(*cells: str, header: bool = False) -> str:
    tag = "th" if header else "td"
    return "<tr>" + "".join(f"<{tag}>{cell}</{tag}>" for cell in cells) + "</tr>"


def _esc(value: Any) -> str:
    return html.escape(str(value))


def _facts(journal: dict[str, Any], summary: JournalSummary) -> list[tuple[str, str]]:
    gd = gameday_section(journal)
    extension: Mapping[str, Any] = gd.get("extension") or {}
    slo = {k: v for k, v in (extension.get("slo") or {}).items() if v is not None}
    return [
        ("experiment", summary.experiment_file or "-"),
        ("run id", str(gd.get("run_id") or "-")),
        ("target", f"{gd.get('target') or '-'}"),
        ("started", _when(build_timeline(journal).start + build_timeline(journal).origin)),
        ("duration", f"{summary.duration_s:.1f} s"),
        ("coverage", f"{summary.fault} x {summary.layer}"),
        ("injected at", ", ".join(summary.injected_at) or "-"),
        ("SLO", ", ".join(f"{k} {v:g}" for k, v in slo.items()) or "-"),
        ("blast radius", ", ".join(f"{k} {v}" for k, v in
                                   (extension.get("blast_radius") or {}).items()
                                   if v is not None) or "-"),
    ]


def _measured(summary: JournalSummary) -> bool:
    """Whether the run measured anything a projection can charge each interruption."""
    return not (summary.rto_s is None and summary.rpo_s is None
                and summary.slowdown_lost_s is None)


def _scale(summary: JournalSummary, fleet: Fleet) -> list[tuple[int, Any]]:
    if not _measured(summary) or no_projection(fleet):
        return []
    sizes = sorted(set(SCALE_FLEETS) | {fleet.gpus})
    rto, rpo = summary.rto_s or 0.0, summary.rpo_s or 0.0
    return [(size, project(rto, rpo, Fleet(size, fleet.interruptions_per_gpu_day,
                                           fleet.source),
                           slowdown_s=summary.slowdown_lost_s or 0.0)) for size in sizes]


def goodput_line(summary: JournalSummary) -> str | None:
    """The work a slowdown left, in one sentence (None: no throughput was measured)."""
    if summary.goodput is None:
        return None
    lost = ("" if summary.slowdown_lost_s is None
            else f"; the window cost {summary.slowdown_lost_s:.3g} s of work at the baseline rate")
    return (f"Goodput during the fault: {summary.goodput:.0%} of the baseline rate "
            f"({1 - summary.goodput:.0%} slower){lost}")


def render_html(journal: dict[str, Any], summary: JournalSummary,
                fleet: Fleet | None = None) -> str:
    fleet = fleet or Fleet()
    line = build_timeline(journal)
    title = summary.title or summary.experiment_file or "experiment"
    badge = ("<span class='badge ok'>PASSED</span>" if summary.passed else
             f"<span class='badge bad'>{_esc(summary.status.upper() or 'FAILED')}</span>")
    description = (journal.get("experiment") or {}).get("description") or ""
    parts = [
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>",
        f"<meta http-equiv='Content-Security-Policy' content=\"{CSP}\">",
        "<meta name='viewport' content='width=device-width, initial-scale=1'>",
        f"<title>{_esc(title)} — gameday report</title><style>{STYLE}</style></head>",
        f"<body><main><h1>{_esc(title)}{badge}</h1>",
        f"<p class='muted'>{_esc(description.strip())}</p>"]
    if summary.reasons:
        parts.append("<ul class='reasons'>" + "".join(f"<li>{_esc(r)}</li>"
                                                      for r in summary.reasons) + "</ul>")
    parts.append("<table class='facts'>" + "".join(_row(_esc(k), _esc(v))
                                                  for k, v in _facts(journal, summary))
                 + "</table>")
    parts.append("<h2>What happened</h2>")
    if line.windows:
        parts.append(timeline_svg(line, f"{title}: SLI timeline"))
        parts.append("<p class='muted'>The legend under the axis names every mark. Each "
                     "event sits in the events band at the time its dotted guide marks on "
                     "the SLI; hover a verifier's box for its name and time.</p>")
    else:
        parts.append(f"<p class='no-fault'>{_esc(_no_fault(line))}</p>")
    parts.append("<h2>Verdict</h2><table class='verdict'>"
                 + _row("check", "verdict", "detail", header=True))
    for what, verdict, detail in verdict_table(journal):
        parts.append(f"<tr><td>{_esc(what)}</td><td class='v-{_esc(verdict)}'>{_esc(verdict)}"
                     f"</td><td>{_esc(detail)}</td></tr>")
    parts.append("</table><h2>Measurements against objectives</h2>")
    parts.append(objectives_svg(line.objectives))
    if line.objectives:
        parts.append("<p class='muted'>Each measurement on its own axis in its unit, from 0: "
                     "the bar is the measured value, the dashed line its objective.</p>")
    parts.append(_faults_html(journal))
    parts.append(_scale_html(summary, fleet))
    parts.append(_environment_html(journal, summary))
    parts.append("</main></body></html>\n")
    return "".join(parts)


def _no_fault(line: Timeline) -> str:
    """Why a run has no timeline: it has no fault onset to draw from."""
    if line.faults_listed:
        return (f"None of the {line.faults_listed} fault(s) this run lists was applied, so "
                "there is no fault onset and no timeline to draw.")
    return "No fault was applied in this run, so there is no fault onset and no timeline to draw."


def _faults_html(journal: dict[str, Any]) -> str:
    faults = gameday_section(journal).get("faults") or []
    rows = [_row("kind", "where", "injected at", "applied", "reverted", "reason", header=True)]
    for fault in faults:
        target = fault.get("target") or {}
        where = (gpu_label(fault.get("node"), target["gpu"]) if "gpu" in target
                 else f"{fault.get('node')}")
        rows.append(_row(_esc(fault.get("kind")), _esc(where), _esc(fault.get("injected_at")),
                         _when(fault.get("applied_at")), _when(fault.get("reverted_at")),
                         _esc(fault.get("revert_reason") or "-")))
    if not faults:
        rows.append(_row("no fault was applied", "", "", "", "", ""))
    return "<h2>Faults</h2><table>" + "".join(rows) + "</table>"


def _scale_html(summary: JournalSummary, fleet: Fleet) -> str:
    scale = _scale(summary, fleet)
    goodput = goodput_line(summary)
    head = "<h2>What it costs at scale</h2>" + (f"<p>{_esc(goodput)}.</p>" if goodput else "")
    if not scale:
        return f"{head}<p class='muted'>{_esc(_unprojected(summary, fleet))}.</p>"
    rows = [_row("fleet (GPUs)", "interruptions / day", "time lost / day", "ETTR",
                 "GPU-hours lost / day", header=True)]
    for size, projection in scale:
        mark = " <b>(the fleet this run stands for)</b>" if size == fleet.gpus else ""
        rows.append(_row(f"{size:,}{mark}", f"{projection.fleet.interruptions_per_day:.2f}",
                         f"{projection.lost_s_per_day:,.0f} s",
                         f"{projection.ettr:.5f}", f"{projection.gpu_hours_lost_per_day:,.1f}"))
    headline = next(p for s, p in scale if s == fleet.gpus)
    rpo = "" if summary.rpo_s else (" No RPO was measured: work redone from the last "
                                    "checkpoint is counted as zero.")
    if headline.slowdown_counted:
        rpo = (" Each interruption is charged the work this run's slowdown cost (it is "
               "larger than RTO + RPO and holds them): as if a slowdown like it came at "
               "the interruption rate.")
    elif summary.rto_s is None:
        rpo += " No RTO was measured: only the work redone is counted."
    return (f"{head}<p>{_esc(headline.line())}.</p>"
            f"<table>{''.join(rows)}</table><p class='muted'>ETTR = 1 / (1 + Λ·L / 86 400 s), "
            f"L = RTO + RPO (or the work a slowdown cost, when larger), Λ = interruptions "
            f"per GPU-day x GPUs. {_esc(fleet.assumptions())}.{_esc(rpo)}</p>")


def _unprojected(summary: JournalSummary, fleet: Fleet) -> str:
    """Why a run's page projects nothing."""
    if not _measured(summary):
        return ("Neither an RTO, an RPO nor a slowdown was measured in this run, so there is "
                "nothing to project")
    return no_projection(fleet) or ""


def _environment_html(journal: dict[str, Any], summary: JournalSummary) -> str:
    gd = gameday_section(journal)
    environment: dict[str, Any] = dict(gd.get("environment") or {})
    argv = environment.pop("argv", None)
    rows = [_row(_esc(k), f"<code>{_esc(v)}</code>") for k, v in sorted(environment.items())]
    if argv:
        rows.append(_row("command", f"<code>{_esc(' '.join(map(str, argv)))}</code>"))
    rows.append(_row("target source", f"<code>{_esc(gd.get('target_source') or '-')}</code>"))
    evidence = [_row("journal", f"<code>{_esc(summary.path)}</code>"),
                _row("journal sha256", f"<code>{summary.sha256}</code>"),
                _row("previous journal sha256",
                     f"<code>{_esc(gd.get('previous_sha256') or '-')}</code>")]
    return ("<h2>Environment</h2><table class='facts'>" + "".join(rows) + "</table>"
            "<h2>Evidence</h2><table class='facts'>" + "".join(evidence) + "</table>")


def render_markdown(journal: dict[str, Any], summary: JournalSummary,
                    fleet: Fleet | None = None) -> str:
    fleet = fleet or Fleet()
    line = build_timeline(journal)
    title = summary.title or summary.experiment_file or "experiment"
    verdict = "✅ PASSED" if summary.passed else f"❌ {summary.status.upper() or 'FAILED'}"
    out = [f"# {title}", "", f"**{verdict}** (exit {summary.exit_code})", ""]
    out += [f"- {summary_reason}" for summary_reason in summary.reasons]
    out += ["", "| | |", "|---|---|"]
    out += [f"| {k} | {v.replace('|', '/')} |" for k, v in _facts(journal, summary)]
    out += ["", "## What happened", "", *_events_markdown(line)]
    out += ["", "## Verdict", "", "| check | verdict | detail |", "|---|---|---|"]
    out += [f"| {what} | {v} | {detail.replace('|', '/')} |"
            for what, v, detail in verdict_table(journal)]
    out += ["", "## Measurements against objectives", ""]
    if line.objectives:
        out += ["| measurement | measured | objective | result |", "|---|---:|---:|---|"]
        out += [f"| {o.label} | {number(o.measured)} {o.unit} | "
                f"{'-' if o.objective is None else f'{number(o.objective)} {o.unit}'} | "
                f"{o.verdict()} |" for o in line.objectives]
    else:
        out.append("No measurement with an objective in this run.")
    scale = _scale(summary, fleet)
    out += ["", "## What it costs at scale", ""]
    goodput = goodput_line(summary)
    if goodput:
        out += [goodput + ".", ""]
    if scale:
        out += [next(p for s, p in scale if s == fleet.gpus).line() + ".", "",
                "| fleet (GPUs) | interruptions/day | ETTR | GPU-hours lost/day |",
                "|---:|---:|---:|---:|"]
        out += [f"| {s:,} | {p.fleet.interruptions_per_day:.2f} | {p.ettr:.5f} | "
                f"{p.gpu_hours_lost_per_day:,.1f} |" for s, p in scale]
        out += ["", f"{fleet.assumptions()}."]
    else:
        out.append(_unprojected(summary, fleet) + ".")
    environment: Mapping[str, Any] = gameday_section(journal).get("environment") or {}
    out += ["", "## Environment", ""]
    out += [f"- {k}: `{v if k != 'argv' else ' '.join(map(str, v))}`"
            for k, v in sorted(environment.items())]
    out += ["", f"Journal `{summary.path}` sha256 `{summary.sha256}`", ""]
    return "\n".join(out)


def _events_markdown(line: Timeline) -> list[str]:
    """The timeline as a table of events, seconds from the fault onset."""
    if not line.windows:
        return [_no_fault(line)]
    events: list[tuple[float, str]] = []
    for window in line.windows:
        events.append((window.start, f"fault window opens: {window.label}"))
        events.append((window.end, "fault window closes"))
    for marker in line.markers:
        if marker.kind != "fault":
            state = {True: " ✓", False: " ✗", None: ""}[marker.ok]
            kind = f"{marker.kind} ({marker.phase})" if marker.phase else marker.kind
            events.append((marker.t, f"{kind}: {marker.label}{state}"))
    if line.rto is not None:
        slo = "" if line.slo_s is None else f" (SLO {float(line.slo_s):g} s)"
        events.append((line.rto[1], f"recovered: RTO {line.rto_s} s{slo}"))
    if line.deadline is not None:
        events.append((line.deadline, f"SLO deadline (onset + {number(line.deadline)} s)"))
    return (["| t (s) | event |", "|---:|---|"]
            + [f"| {t:+.2f} | {text} |" for t, text in sorted(events, key=lambda e: e[0])])


def report(journal_path: Path, fmt: str = "html", fleet: Fleet | None = None) -> str:
    """Render one journal file in ``fmt`` (html or md)."""
    if fmt not in FORMATS:
        raise InvalidInput(f"--format must be html or md, got {fmt!r}")
    journal, summary = read_journal(journal_path)
    if fmt == "html":
        return render_html(journal, summary, fleet)
    return render_markdown(journal, summary, fleet)


