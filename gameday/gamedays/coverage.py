"""``gameday coverage``: the fault kind x coverage layer matrix, built from journals.

Every journal under the directory (recursively; ``*.json`` with a ``gameday`` section)
lands in one cell: its experiment's ``coverage.fault`` x ``coverage.layer`` (the layer
defaults to the fault kind's own coverage layer from the catalogue). A cell counts
runs, passed runs, *scenarios* (distinct experiment files) and *passing scenarios*
(scenarios whose latest run passed), the last run, the RTO p50/p95 and the evidence:
the SHA-256 of every journal file in it, so an auditor can check each one
(``sha256sum``) against the hash chain.

A requirement (``coverage.require`` in a playbook, see ``gameday.gamedays.playbook``) names a
cell and a number of scenarios; the cell is *missing* when fewer scenarios ran,
*failing* when enough ran but fewer passed on their latest run. Unmet requirements
make ``gameday coverage --require`` exit 1 and are named one per line.
"""

import csv
import html
import io
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gameday.errors import InvalidInput
from gameday.experiment.extension import COVERAGE_LAYERS
from gameday.gamedays.playbook import Requirement
from gameday.report.summary import JournalSummary, is_journal_file, read_summary
from gameday.stats import percentile

FORMATS = ("md", "html", "csv", "json")


@dataclass
class Cell:
    fault: str
    layer: str
    runs: int = 0
    passed: int = 0
    last_run: float = 0.0
    rtos: list[float] = field(default_factory=list)
    evidence: list[tuple[str, str]] = field(default_factory=list)  # (sha256, path)
    latest: dict[str, tuple[float, bool]] = field(default_factory=dict)  # scenario -> last

    def add(self, summary: JournalSummary) -> None:
        self.runs += 1
        self.passed += summary.passed
        self.last_run = max(self.last_run, summary.ended_at)
        if summary.rto_s is not None:
            self.rtos.append(summary.rto_s)
        self.evidence.append((summary.sha256, summary.path))
        previous = self.latest.get(summary.scenario)
        if previous is None or summary.ended_at >= previous[0]:
            self.latest[summary.scenario] = (summary.ended_at, summary.passed)

    @property
    def scenarios(self) -> int:
        return len(self.latest)

    @property
    def passing_scenarios(self) -> int:
        return sum(1 for _, ok in self.latest.values() if ok)

    @property
    def rto_p50(self) -> float | None:
        return percentile(self.rtos, 0.5) if self.rtos else None

    @property
    def rto_p95(self) -> float | None:
        return percentile(self.rtos, 0.95) if self.rtos else None

    def to_json(self) -> dict[str, Any]:
        import datetime

        last = (datetime.datetime.fromtimestamp(self.last_run, datetime.UTC).strftime(
            "%Y-%m-%dT%H:%M:%SZ") if self.last_run else None)
        return {"fault": self.fault, "layer": self.layer, "runs": self.runs,
                "passed": self.passed, "scenarios": self.scenarios,
                "passing_scenarios": self.passing_scenarios, "last_run": last,
                "rto_p50_s": _round(self.rto_p50), "rto_p95_s": _round(self.rto_p95),
                "evidence": [{"sha256": sha, "journal": path} for sha, path in self.evidence]}


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


@dataclass
class Finding:
    """One unmet requirement."""

    requirement: Requirement
    state: str  # missing | failing
    cell: Cell | None

    def line(self) -> str:
        req = self.requirement
        ran = self.cell.scenarios if self.cell else 0
        passing = self.cell.passing_scenarios if self.cell else 0
        if self.state == "missing":
            return (f"missing: {req.describe()}: {ran} of {req.scenarios} required scenarios "
                    f"run")
        return (f"failing: {req.describe()}: {passing} of {req.scenarios} required scenarios "
                f"passing on their latest run ({ran} run)")


@dataclass
class Matrix:
    cells: dict[tuple[str, str], Cell] = field(default_factory=dict)
    journals: int = 0
    skipped: list[str] = field(default_factory=list)
    faults: list[str] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    requirements: list[Requirement] = field(default_factory=list)

    def cell(self, fault: str, layer: str) -> Cell | None:
        return self.cells.get((fault, layer))

    def add(self, summary: JournalSummary) -> None:
        key = (summary.fault, summary.layer)
        cell = self.cells.get(key)
        if cell is None:
            cell = self.cells[key] = Cell(*key)
        cell.add(summary)
        self.journals += 1

    def check(self, requirements: Iterable[Requirement]) -> list[Finding]:
        self.requirements = list(requirements)
        self.findings = []
        for req in self.requirements:
            cell = self.cell(*req.cell)
            if cell is None or cell.scenarios < req.scenarios:
                self.findings.append(Finding(req, "missing", cell))
            elif cell.passing_scenarios < req.scenarios:
                self.findings.append(Finding(req, "failing", cell))
        return self.findings

    @property
    def exit_code(self) -> int:
        return 1 if self.findings else 0

    def rows(self) -> list[str]:
        """Fault kinds: every catalogue kind, every kind seen, every kind required."""
        from faults.catalogue import CATALOGUE

        names = set(CATALOGUE) | {f for f, _ in self.cells} | {r.fault for r in
                                                                 self.requirements}
        return sorted(names)


def build(directory: Path, *, summaries: Iterable[JournalSummary] | None = None) -> Matrix:
    """Read every journal under ``directory`` (or take ``summaries``) into a matrix."""
    matrix = Matrix()
    if summaries is not None:
        for summary in summaries:
            matrix.add(summary)
        return matrix
    if not directory.is_dir():
        raise InvalidInput("is not a directory of journals", file=str(directory))
    for path in sorted(directory.rglob("*.json")):
        if not is_journal_file(path):
            continue
        try:
            summary = read_summary(path)
        except InvalidInput:
            matrix.skipped.append(str(path))
            continue
        matrix.add(summary)
    return matrix


# -- rendering --------------------------------------------------------------------------

def _cell_text(cell: Cell | None) -> str:
    return "·" if cell is None else f"{cell.passed}/{cell.runs}"


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"


def _requirement_of(matrix: Matrix, cell: Cell) -> str:
    for req in matrix.requirements:
        if req.cell == (cell.fault, cell.layer):
            state = next((f.state for f in matrix.findings if f.requirement is req), "met")
            return f"{req.scenarios} ({state})"
    return ""


def to_markdown(matrix: Matrix) -> str:
    lines = [f"## Coverage: {matrix.journals} journals", "",
             "Cells show passed/run; `·` is not covered.", "",
             "| fault kind | " + " | ".join(COVERAGE_LAYERS) + " |",
             "|---|" + "---|" * len(COVERAGE_LAYERS)]
    for fault in matrix.rows():
        cells = [_cell_text(matrix.cell(fault, layer)) for layer in COVERAGE_LAYERS]
        lines.append(f"| {fault} | " + " | ".join(cells) + " |")
    lines += ["", "| fault | layer | scenarios | passing | runs | passed | last run | RTO p50 | "
                  "RTO p95 | required | evidence (sha256) |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for cell in sorted(matrix.cells.values(), key=lambda c: (c.fault, c.layer)):
        data = cell.to_json()
        evidence = ", ".join(f"`{sha[:12]}`" for sha, _ in cell.evidence[:5])
        if len(cell.evidence) > 5:
            evidence += f" … (+{len(cell.evidence) - 5})"
        lines.append(f"| {cell.fault} | {cell.layer} | {cell.scenarios} | "
                     f"{cell.passing_scenarios} | {cell.runs} | {cell.passed} | "
                     f"{data['last_run'] or '-'} | {_seconds(cell.rto_p50)} | "
                     f"{_seconds(cell.rto_p95)} | {_requirement_of(matrix, cell)} | "
                     f"{evidence} |")
    if matrix.requirements:
        lines += ["", "### Requirements", ""]
        if not matrix.findings:
            lines.append(f"All {len(matrix.requirements)} required cells are covered and "
                         "passing.")
        lines += [f"- ❌ {finding.line()}" for finding in matrix.findings]
    if matrix.skipped:
        lines += ["", f"Skipped {len(matrix.skipped)} JSON files that are not gameday "
                      "journals."]
    return "\n".join(lines) + "\n"


def to_json(matrix: Matrix) -> str:
    document = {
        "journals": matrix.journals, "layers": list(COVERAGE_LAYERS), "faults": matrix.rows(),
        "cells": [c.to_json() for c in sorted(matrix.cells.values(),
                                              key=lambda c: (c.fault, c.layer))],
        "requirements": [{"fault": r.fault, "layer": r.layer, "scenarios": r.scenarios,
                          "label": r.label,
                          "state": next((f.state for f in matrix.findings
                                         if f.requirement is r), "met")}
                         for r in matrix.requirements],
        "unmet": [f.line() for f in matrix.findings], "skipped": matrix.skipped}
    return json.dumps(document, indent=2) + "\n"


def to_csv(matrix: Matrix) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["fault", "layer", "scenarios", "passing_scenarios", "runs", "passed",
                     "last_run", "rto_p50_s", "rto_p95_s", "required", "evidence_sha256"])
    for cell in sorted(matrix.cells.values(), key=lambda c: (c.fault, c.layer)):
        data = cell.to_json()
        writer.writerow([cell.fault, cell.layer, cell.scenarios, cell.passing_scenarios,
                         cell.runs, cell.passed, data["last_run"] or "", data["rto_p50_s"] or "",
                         data["rto_p95_s"] or "", _requirement_of(matrix, cell),
                         " ".join(sha for sha, _ in cell.evidence)])
    for finding in matrix.findings:
        if finding.cell is None:
            req = finding.requirement
            writer.writerow([req.fault, req.layer, 0, 0, 0, 0, "", "", "",
                             f"{req.scenarios} (missing)", ""])
    return buffer.getvalue()


_HTML_STYLE = """
body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',sans-serif;margin:2rem;color:#1d2330}
table{border-collapse:collapse;margin:1rem 0}th,td{border:1px solid #d5dae3;padding:.35rem .6rem;
text-align:left}th{background:#f2f4f8}td.c{text-align:center;font-variant-numeric:tabular-nums}
.ok{background:#dcf5e3}.some{background:#fff1c9}.bad{background:#fbd9d9}.none{color:#9aa3b2}
.req{outline:2px solid #304ffe;outline-offset:-2px}code{font-size:12px;word-break:break-all}
td.c{white-space:nowrap}
"""


def to_html(matrix: Matrix) -> str:
    """A self-contained page (no script, no external resource)."""
    required = {r.cell: r for r in matrix.requirements}
    failing = {f.requirement.cell for f in matrix.findings}
    head = "".join(f"<th>{layer}</th>" for layer in COVERAGE_LAYERS)
    body = []
    for fault in matrix.rows():
        cells = []
        for layer in COVERAGE_LAYERS:
            cell = matrix.cell(fault, layer)
            klass = "none" if cell is None else (
                "ok" if cell.passed == cell.runs else "some" if cell.passed else "bad")
            if (fault, layer) in failing:
                klass = "bad"
            if (fault, layer) in required:
                klass += " req"
            title = "" if cell is None else (
                f" title='{cell.scenarios} scenarios, RTO p95 {_seconds(cell.rto_p95)}'")
            cells.append(f"<td class='c {klass}'{title}>{_cell_text(cell)}</td>")
        body.append(f"<tr><th>{html.escape(fault)}</th>{''.join(cells)}</tr>")
    details = []
    for cell in sorted(matrix.cells.values(), key=lambda c: (c.fault, c.layer)):
        data = cell.to_json()
        evidence = "<br>".join(f"<code>{sha}</code>" for sha, _ in cell.evidence[:10])
        if len(cell.evidence) > 10:
            evidence += f"<br>… and {len(cell.evidence) - 10} more"
        details.append(
            f"<tr><td>{html.escape(cell.fault)}</td><td>{cell.layer}</td>"
            f"<td class=c>{cell.scenarios}</td><td class=c>{cell.passing_scenarios}</td>"
            f"<td class=c>{cell.runs}</td><td class=c>{cell.passed}</td>"
            f"<td>{data['last_run'] or '-'}</td><td class=c>{_seconds(cell.rto_p50)}</td>"
            f"<td class=c>{_seconds(cell.rto_p95)}</td>"
            f"<td>{html.escape(_requirement_of(matrix, cell))}</td><td>{evidence}</td></tr>")
    findings = "".join(f"<li>{html.escape(f.line())}</li>" for f in matrix.findings)
    verdict = ("" if not matrix.requirements else
               f"<p><b>{len(matrix.findings)} of {len(matrix.requirements)} required cells "
               f"unmet</b></p><ul>{findings}</ul>")
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        "<meta http-equiv='Content-Security-Policy' content=\"default-src 'none'; "
        "style-src 'unsafe-inline'\">"
        f"<title>gameday coverage</title><style>{_HTML_STYLE}</style></head><body>"
        f"<h1>Coverage matrix</h1><p>{matrix.journals} journals. Cells: passed/run; outlined "
        f"cells are required.</p>{verdict}"
        f"<table><tr><th>fault kind</th>{head}</tr>{''.join(body)}</table>"
        "<h2>Cells</h2><table><tr><th>fault</th><th>layer</th><th>scenarios</th>"
        "<th>passing</th><th>runs</th><th>passed</th><th>last run</th><th>RTO p50</th>"
        "<th>RTO p95</th><th>required</th><th>evidence (journal sha256)</th></tr>"
        f"{''.join(details)}</table></body></html>\n")


def render(matrix: Matrix, fmt: str) -> str:
    if fmt not in FORMATS:
        raise InvalidInput(f"--format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    return {"md": to_markdown, "html": to_html, "csv": to_csv, "json": to_json}[fmt](matrix)
