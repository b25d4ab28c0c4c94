"""``gameday coverage``: the fault kind x coverage layer matrix, built from journals.

Only verified evidence counts: every directory of journals is checked as a hash chain
(``gameday.evidence.audit``: each journal's own SHA-256 against what its successor
recorded, and its Ed25519 signature when it is signed or a trusted key is given), and a
journal that does not verify is listed with the reason and never counted. A directory
holding no gameday journal is an error.

Every verified journal under the directory (recursively; ``*.json`` with a ``gameday``
section) lands in one cell: its experiment's ``coverage.fault`` x ``coverage.layer`` (the layer
defaults to the fault kind's own coverage layer from the catalogue). A cell counts
runs, passed runs, *scenarios* (distinct experiment files) and *passing scenarios*
(scenarios whose latest run passed), the last run, the RTO p50/p95 and the evidence:
the SHA-256 of every journal file in it, so an auditor can check each one
(``sha256sum``) against the hash chain.

A requirement (``coverage.require`` in a playbook, see ``gameday.gamedays.playbook``) names a
cell and a number of scenarios, and may ask for evidence from a real target only
(``real: true``) or no older than ``max_age_days``; the cell is *missing* when fewer
such scenarios ran, *failing* when enough ran but fewer passed on their latest run.
Unmet requirements make ``gameday coverage --require`` exit 1 and are named one per line.

Every matrix states its provenance: when it was made, from which directory, by which
gameday version, the time span of its evidence, the targets it came from, and per cell
the layers its faults were really injected at (``virtual`` for the lab).
"""

import csv
import datetime
import html
import io
import json
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from gameday import __version__
from gameday.errors import InvalidInput
from gameday.evidence import checked
from gameday.evidence.index import VerifiedIndex
from gameday.evidence.summary import JournalSummary, run_page
from gameday.experiment.extension import COVERAGE_LAYERS
from gameday.gamedays.playbook import Requirement
from gameday.gamedays.score import GroupScore, Score
from gameday.kinds import CATALOGUE
from gameday.stats import percentile

FORMATS = ("md", "html", "csv", "json")


def _iso(epoch: float) -> str | None:
    return (datetime.datetime.fromtimestamp(epoch, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            if epoch else None)


@dataclass
class Cell:
    """One fault kind x coverage layer: the verified runs filed under it."""

    fault: str
    layer: str
    summaries: list[JournalSummary] = field(default_factory=list)
    #: (number of summaries it was computed over, scenarios, passing) — renderings ask
    #: for both counts of every cell several times
    _counts: tuple[int, int, int] = field(default=(-1, 0, 0), repr=False, compare=False)

    def add(self, summary: JournalSummary) -> None:
        self.summaries.append(summary)

    def _scenario_counts(self) -> tuple[int, int]:
        if self._counts[0] != len(self.summaries):
            self._counts = (len(self.summaries), *scenario_counts(self.summaries))
        return self._counts[1], self._counts[2]

    def counted(self, *, real: bool = False, newer_than: float = 0.0) -> list[JournalSummary]:
        """The runs a requirement may count: real targets only, ended after ``newer_than``."""
        return [s for s in self.summaries if (s.real or not real) and s.ended_at >= newer_than]

    @property
    def runs(self) -> int:
        return len(self.summaries)

    @property
    def passed(self) -> int:
        return sum(1 for s in self.summaries if s.passed)

    @property
    def last_run(self) -> float:
        return max((s.ended_at for s in self.summaries), default=0.0)

    @property
    def rtos(self) -> list[float]:
        return [s.rto_s for s in self.summaries if s.rto_s is not None]

    @property
    def evidence(self) -> list[tuple[str, str]]:
        """``(sha256, path)`` of every journal counted here."""
        return [(s.sha256, s.path) for s in self.summaries]

    @property
    def injected_at(self) -> list[str]:
        return sorted({layer for s in self.summaries for layer in s.injected_at})

    @property
    def targets(self) -> list[str]:
        return sorted({s.target_label for s in self.summaries})

    @property
    def real(self) -> bool:
        return any(s.real for s in self.summaries)

    @property
    def scenarios(self) -> int:
        return self._scenario_counts()[0]

    @property
    def passing_scenarios(self) -> int:
        return self._scenario_counts()[1]

    @property
    def rto_p50(self) -> float | None:
        rtos = self.rtos
        return percentile(rtos, 0.5) if rtos else None

    @property
    def rto_p95(self) -> float | None:
        rtos = self.rtos
        return percentile(rtos, 0.95) if rtos else None

    def to_json(self) -> dict[str, Any]:
        return {"fault": self.fault, "layer": self.layer, "runs": self.runs,
                "passed": self.passed, "scenarios": self.scenarios,
                "passing_scenarios": self.passing_scenarios,
                "last_run": _iso(self.last_run),
                "rto_p50_s": _round(self.rto_p50), "rto_p95_s": _round(self.rto_p95),
                "injected_at": self.injected_at, "targets": self.targets, "real": self.real,
                "evidence": [{"sha256": sha, "journal": path} for sha, path in self.evidence]}


def scenario_counts(summaries: Iterable[JournalSummary]) -> tuple[int, int]:
    """``(scenarios, passing)``: distinct experiments, and those whose latest run passed."""
    latest: dict[str, JournalSummary] = {}
    for summary in summaries:
        previous = latest.get(summary.scenario)
        if previous is None or summary.ended_at >= previous.ended_at:
            latest[summary.scenario] = summary
    return len(latest), sum(1 for s in latest.values() if s.passed)


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


@dataclass
class Finding:
    """One unmet requirement."""

    requirement: Requirement
    state: str  # missing | failing
    cell: Cell | None
    ran: int = 0
    passing: int = 0
    rejected: int = 0  # journals of this cell that did not verify

    def line(self) -> str:
        req = self.requirement
        note = (f"; {self.rejected} journal{'s' if self.rejected != 1 else ''} of this cell "
                "did not verify and were not counted" if self.rejected else "")
        if self.state == "missing":
            return (f"missing: {req.describe()}: {self.ran} of {req.scenarios} required "
                    f"scenarios run{note}")
        return (f"failing: {req.describe()}: {self.passing} of {req.scenarios} required "
                f"scenarios passing on their latest run ({self.ran} run){note}")


@dataclass
class Rejected:
    """A journal that was not counted, and why."""

    path: str
    reason: str
    cell: tuple[str, str] | None = None  # where it would have counted, when readable


@dataclass
class Matrix:
    cells: dict[tuple[str, str], Cell] = field(default_factory=dict)
    journals: int = 0
    skipped: list[str] = field(default_factory=list)
    rejected: list[Rejected] = field(default_factory=list)
    #: what the chains showed beyond rejected journals (one missing, one outside the
    #: chain, a head that does not hold), ``DIR: problem``
    chain_problems: list[str] = field(default_factory=list)
    excluded_lab: int = 0
    faults: list[str] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    requirements: list[Requirement] = field(default_factory=list)
    directory: str = ""
    generated_at: float = 0.0
    version: str = __version__
    signatures_trusted: bool = False

    def cell(self, fault: str, layer: str) -> Cell | None:
        return self.cells.get((fault, layer))

    @property
    def tampered_cells(self) -> dict[tuple[str, str], int]:
        """Per cell, its journals that did not verify: evidence was tampered with (or
        cannot be trusted), so the cell is marked whatever else it holds."""
        return dict(sorted(Counter(r.cell for r in self.rejected if r.cell).items()))

    def add(self, summary: JournalSummary) -> None:
        key = (summary.fault, summary.layer)
        cell = self.cells.get(key)
        if cell is None:
            cell = self.cells[key] = Cell(*key)
        cell.add(summary)
        self.journals += 1

    @property
    def summaries(self) -> list[JournalSummary]:
        return [s for cell in self.cells.values() for s in cell.summaries]

    @property
    def span(self) -> tuple[float, float] | None:
        ended = [s.ended_at for s in self.summaries if s.ended_at]
        return (min(ended), max(ended)) if ended else None

    @property
    def targets(self) -> dict[str, int]:
        """Verified journals per target they came from."""
        return dict(sorted(Counter(s.target_label for s in self.summaries).items()))

    def check(self, requirements: Iterable[Requirement]) -> list[Finding]:
        self.requirements = list(requirements)
        self.findings = []
        now = self.generated_at or time.time()
        for req in self.requirements:
            cell = self.cell(*req.cell)
            newer_than = now - req.max_age_days * 86400 if req.max_age_days is not None else 0
            counted = cell.counted(real=req.real, newer_than=newer_than) if cell else []
            ran, passing = scenario_counts(counted)
            rejected = sum(1 for r in self.rejected if r.cell == req.cell)
            if ran < req.scenarios:
                self.findings.append(Finding(req, "missing", cell, ran, passing, rejected))
            elif passing < req.scenarios:
                self.findings.append(Finding(req, "failing", cell, ran, passing, rejected))
        return self.findings

    @property
    def exit_code(self) -> int:
        return 1 if self.findings else 0

    def requirements_line(self) -> str:
        """``6 of 6 required cells met``, or ``4 of 6 required cells met, 2 unmet``."""
        total, unmet = len(self.requirements), len(self.findings)
        return (f"{total - unmet} of {total} required cells met"
                + (f", {unmet} unmet" if unmet else ""))

    def rows(self) -> list[str]:
        """Fault kinds: every catalogue kind, every kind seen, every kind required."""
        names = set(CATALOGUE) | {f for f, _ in self.cells} | {r.fault for r in
                                                                 self.requirements}
        return sorted(names)

    def applicable(self, fault: str, layer: str) -> bool:
        """Whether the catalogue says ``fault`` can act on ``layer`` (or evidence says so)."""
        kind = CATALOGUE.get(fault)
        return (kind is None or layer in kind.coverage_layers or (fault, layer) in self.cells
                or any(r.cell == (fault, layer) for r in self.requirements))

    def provenance(self) -> dict[str, Any]:
        """When, from what, by which version, over which span and targets this was made."""
        span = self.span
        return {"generated_at": _iso(self.generated_at), "directory": self.directory,
                "gameday_version": self.version,
                "evidence_from": _iso(span[0]) if span else None,
                "evidence_to": _iso(span[1]) if span else None,
                "targets": self.targets, "verified_journals": self.journals,
                "rejected_journals": len(self.rejected), "excluded_lab_journals":
                self.excluded_lab, "signatures_checked_against_trusted_key":
                self.signatures_trusted}

    def scope_line(self) -> str:
        span = self.span
        when = (f"evidence {_iso(span[0])} to {_iso(span[1])}" if span else "no evidence")
        targets = ", ".join(f"{name} ({count})" for name, count in self.targets.items())
        rejected = f", {len(self.rejected)} rejected" if self.rejected else ""
        excluded = f", {self.excluded_lab} lab journals excluded" if self.excluded_lab else ""
        return (f"Generated {_iso(self.generated_at)} by gameday {self.version} from "
                f"{self.directory}: {self.journals} verified journals{rejected}{excluded}; "
                f"{when}; targets: {targets or 'none'}.")

    def audit_rows(self) -> list[tuple[str, str, str, int]]:
        """The auditors' view: ``(family, layer, kind, verified scenarios)`` per cell.

        A verified scenario is a distinct experiment whose latest verified run passed.
        """
        rows = []
        for (fault, layer), cell in sorted(self.cells.items()):
            kind = CATALOGUE.get(fault)
            rows.append((kind.family if kind and kind.family else fault, layer, fault,
                         cell.passing_scenarios))
        return rows


def build(directory: Path, *, summaries: Iterable[JournalSummary] | None = None,
          trusted: Ed25519PublicKey | None = None, exclude_lab: bool = False,
          clock: Callable[[], float] = time.time, index: VerifiedIndex | None = None,
          evidence: checked.Evidence | None = None) -> Matrix:
    """Verify and read every journal under ``directory`` (or take ``summaries``, or the
    ``evidence`` already checked), through the verified ``index`` when one is given.

    Raises :class:`InvalidInput` when ``directory`` is not a directory or holds no
    gameday journal at all (verified or not).
    """
    matrix = Matrix(directory=str(directory), generated_at=clock(),
                    signatures_trusted=trusted is not None)
    if summaries is not None:
        for summary in summaries:
            matrix.add(summary)
        return matrix
    evidence = evidence or checked.check(directory, trusted, index)
    matrix.chain_problems = [f"{where}: {problem}" for where, result in
                             sorted(evidence.chains.items()) for problem in result.problems]
    for journal in evidence.journals:
        found = journal.summary
        if found is None:
            matrix.skipped.append(str(journal.path))
        elif journal.problem is not None:
            matrix.rejected.append(Rejected(str(journal.path), journal.problem,
                                            (found.fault, found.layer)))
        elif exclude_lab and not found.real:
            matrix.excluded_lab += 1
        else:
            matrix.add(found)
    if not matrix.journals and not matrix.rejected and not matrix.excluded_lab:
        raise InvalidInput("holds no gameday journal"
                           + (f" ({len(matrix.skipped)} other JSON files)"
                              if matrix.skipped else ""), file=str(directory))
    return matrix


# -- rendering --------------------------------------------------------------------------

NOT_APPLICABLE = "—"
NOT_COVERED = "·"


TAMPERED = "tampered"


def _cell_text(matrix: Matrix, fault: str, layer: str, tampered: int) -> str:
    cell = matrix.cell(fault, layer)
    mark = f" {TAMPERED} ({tampered})" if tampered else ""
    if cell is not None:
        return f"{cell.passed}/{cell.runs}" + ("" if cell.real else " (lab)") + mark
    if tampered:
        return mark.strip()
    return NOT_COVERED if matrix.applicable(fault, layer) else NOT_APPLICABLE


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"


def _requirement_of(matrix: Matrix, cell: Cell) -> str:
    for req in matrix.requirements:
        if req.cell == (cell.fault, cell.layer):
            state = next((f.state for f in matrix.findings if f.requirement is req), "met")
            return f"{req.scenarios} ({state})"
    return ""


def _sorted_cells(matrix: Matrix) -> list[Cell]:
    return sorted(matrix.cells.values(), key=lambda c: (c.fault, c.layer))


LEGEND = (f"Cells show passed/run of verified journals; `(lab)`: evidence from the virtual "
          f"lab only; `{NOT_COVERED}`: not covered yet; `{NOT_APPLICABLE}`: the fault kind "
          f"cannot act at that layer; `{TAMPERED} (N)`: N journals of the cell did not "
          "verify (edited, removed, re-signed or rolled back) and were not counted.")


def to_markdown(matrix: Matrix) -> str:
    lines = [f"## Coverage: {matrix.journals} verified journals", "", matrix.scope_line(), "",
             LEGEND, "",
             "| fault kind | " + " | ".join(COVERAGE_LAYERS) + " |",
             "|---|" + "---|" * len(COVERAGE_LAYERS)]
    tampered = matrix.tampered_cells
    for fault in matrix.rows():
        cells = [_cell_text(matrix, fault, layer, tampered.get((fault, layer), 0))
                 for layer in COVERAGE_LAYERS]
        lines.append(f"| {fault} | " + " | ".join(cells) + " |")
    lines += ["", "### Verified scenarios by fault family", "",
              "| fault family | layer | kind | verified scenarios |", "|---|---|---|---|"]
    lines += [f"| {family} | {layer} | {kind} | {count} |"
              for family, layer, kind, count in matrix.audit_rows()]
    lines += ["", "| fault | layer | scenarios | passing | runs | passed | last run | RTO p50 | "
                  "RTO p95 | injected at | targets | required | evidence (sha256) |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for cell in _sorted_cells(matrix):
        data = cell.to_json()
        evidence = ", ".join(f"`{sha[:12]}`" for sha, _ in cell.evidence[:5])
        if len(cell.evidence) > 5:
            evidence += f" … (+{len(cell.evidence) - 5})"
        lines.append(f"| {cell.fault} | {cell.layer} | {cell.scenarios} | "
                     f"{cell.passing_scenarios} | {cell.runs} | {cell.passed} | "
                     f"{data['last_run'] or '-'} | {_seconds(cell.rto_p50)} | "
                     f"{_seconds(cell.rto_p95)} | {', '.join(cell.injected_at)} | "
                     f"{', '.join(cell.targets)} | {_requirement_of(matrix, cell)} | "
                     f"{evidence} |")
    if matrix.requirements:
        lines += ["", "### Requirements", ""]
        lines += [f"**{matrix.requirements_line()}**", ""]
        lines += [f"- ❌ {finding.line()}" for finding in matrix.findings]
    if matrix.rejected:
        lines += ["", f"### Rejected journals ({len(matrix.rejected)}, not counted)", ""]
        lines += [f"- `{r.path}`: {r.reason}" for r in matrix.rejected]
    if matrix.chain_problems:
        lines += ["", f"### Chain problems ({len(matrix.chain_problems)})", ""]
        lines += [f"- {problem}" for problem in matrix.chain_problems]
    if matrix.skipped:
        lines += ["", f"Skipped {len(matrix.skipped)} JSON files that are not gameday "
                      "journals."]
    return "\n".join(lines) + "\n"


def to_json(matrix: Matrix) -> str:
    document = {
        "provenance": matrix.provenance(),
        "journals": matrix.journals, "layers": list(COVERAGE_LAYERS), "faults": matrix.rows(),
        "applicable": {fault: [layer for layer in COVERAGE_LAYERS
                               if matrix.applicable(fault, layer)] for fault in matrix.rows()},
        "cells": [c.to_json() for c in _sorted_cells(matrix)],
        "audit": [{"family": family, "layer": layer, "kind": kind, "verified_scenarios": n}
                  for family, layer, kind, n in matrix.audit_rows()],
        "requirements": [{"fault": r.fault, "layer": r.layer, "scenarios": r.scenarios,
                          "label": r.label, "real": r.real, "max_age_days": r.max_age_days,
                          "state": next((f.state for f in matrix.findings
                                         if f.requirement is r), "met")}
                         for r in matrix.requirements],
        "unmet": [f.line() for f in matrix.findings],
        "rejected": [{"journal": r.path, "reason": r.reason} for r in matrix.rejected],
        "chain_problems": matrix.chain_problems,
        "tampered": [{"fault": fault, "layer": layer, "rejected": count}
                     for (fault, layer), count in matrix.tampered_cells.items()],
        "skipped": matrix.skipped}
    return json.dumps(document, indent=2) + "\n"


def to_csv(matrix: Matrix) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["fault", "layer", "scenarios", "passing_scenarios", "runs", "passed",
                     "last_run", "rto_p50_s", "rto_p95_s", "injected_at", "targets", "real",
                     "required", "evidence_sha256"])
    for cell in _sorted_cells(matrix):
        data = cell.to_json()
        writer.writerow([cell.fault, cell.layer, cell.scenarios, cell.passing_scenarios,
                         cell.runs, cell.passed, data["last_run"] or "", data["rto_p50_s"] or "",
                         data["rto_p95_s"] or "", " ".join(cell.injected_at),
                         "; ".join(cell.targets), str(cell.real).lower(),
                         _requirement_of(matrix, cell),
                         " ".join(sha for sha, _ in cell.evidence)])
    for finding in matrix.findings:
        if finding.cell is None:
            req = finding.requirement
            writer.writerow([req.fault, req.layer, 0, 0, 0, 0, "", "", "", "", "", "",
                             f"{req.scenarios} (missing)", ""])
    return buffer.getvalue()


_HTML_STYLE = """
body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',sans-serif;margin:2rem;color:#1d2330}
table{border-collapse:collapse;margin:1rem 0}th,td{border:1px solid #d5dae3;padding:.35rem .6rem;
text-align:left}th{background:#f2f4f8}td.c{text-align:center;font-variant-numeric:tabular-nums}
.ok{background:#dcf5e3}.some{background:#fff1c9}.bad{background:#fbd9d9}
.none{color:#1d2330;background:#ffffff;font-weight:bold;font-size:16px}
.na{color:#5b6474;background:repeating-linear-gradient(135deg,#eceff4 0 4px,#dfe3ea 4px 8px)}
.lab{font-style:italic}
.req{outline:2px solid #304ffe;outline-offset:-2px}
.tampered{outline:3px dashed #b00020;outline-offset:-3px;font-weight:bold}
code{font-size:12px;white-space:nowrap}
td.c{white-space:nowrap}td.c a{color:inherit;text-decoration:none}.scope{color:#4a5263}
dl.legend{display:grid;grid-template-columns:max-content 1fr;gap:.3rem .8rem;align-items:center}
dl.legend dt{padding:.1rem .5rem;min-width:6rem;text-align:center;border:1px solid #d5dae3}
dl.legend dd{margin:0}
div.scroll{max-width:100%;overflow-x:auto}div.scroll table{margin:0}
table.cells td.runs{min-width:16rem;overflow-wrap:anywhere}
table.cells td.runs code{white-space:normal;word-break:break-all}
"""


def _anchor(fault: str, layer: str) -> str:
    return f"cell-{fault}-{layer}".replace(".", "-")


def _run_link(path: str, sha: str) -> str:
    """The run's own report when it was rendered, else its journal, labelled by name."""
    page = run_page(Path(path))
    href = page.as_uri() if page.is_absolute() else str(page)
    what = "run report" if page.suffix == ".html" else "journal"
    return (f"<a href='{html.escape(href)}'>{html.escape(page.name)}</a> ({what}) "
            f"<code>{sha}</code>")


def _score_html(score: Score | None) -> str:
    """The resilience score's section: overall, per service, per cell, each point's
    journal hash."""
    if score is None:
        return ""

    def value(group: GroupScore) -> str:
        return "-" if group.value is None else f"{group.value:.1f}"

    def rows(groups: Iterable[GroupScore]) -> str:
        out = []
        for group in groups:
            traced = ", ".join(f"<code>{html.escape((p.sha256 or '')[:12])}</code>"
                               for p in group.points[:6] if p.sha256)
            more = f" … (+{len(group.points) - 6})" if len(group.points) > 6 else ""
            not_run = sum(1 for p in group.points if p.journal is None)
            out.append(f"<tr><td>{html.escape(group.name)}</td><td class=c>{value(group)}</td>"
                       f"<td class=c>{group.weight:g}</td><td class=c>{not_run}</td>"
                       f"<td>{traced}{more}</td></tr>")
        return "".join(out)

    head = ("<tr><th>{}</th><th>score</th><th>weight</th><th>not run</th>"
            "<th>from journals (sha256)</th></tr>")
    policy = score.policy
    weights = ", ".join(f"{name} {weight:g}" for name, weight in sorted(policy.weights.items()))
    return (f"<h2 id=score>Resilience score: {value(score.overall)}</h2>"
            f"<p class=scope>From verified journals only: each scenario's newest run, weighted "
            f"by SLO severity ({html.escape(weights)}), a pass halving every "
            f"{policy.half_life_days:g} days; a required scenario not run counts as zero; "
            f"{len(score.rejected)} rejected journals listed, never counted "
            "(<code>gameday score</code>).</p>"
            f"<table>{head.format('service')}{rows(score.services)}</table>"
            f"<table>{head.format('cell')}{rows(score.cells)}</table>")


def to_html(matrix: Matrix, score: Score | None = None) -> str:
    """A self-contained page (no script, no external resource), with the resilience
    ``score`` when one is given."""
    required = {r.cell: r for r in matrix.requirements}
    failing = {f.requirement.cell for f in matrix.findings}
    tampered = matrix.tampered_cells
    head = "".join(f"<th>{layer}</th>" for layer in COVERAGE_LAYERS)
    body = []
    for fault in matrix.rows():
        cells = []
        for layer in COVERAGE_LAYERS:
            cell = matrix.cell(fault, layer)
            text = html.escape(_cell_text(matrix, fault, layer,
                                          tampered.get((fault, layer), 0)))
            if cell is None:
                klass = "none" if matrix.applicable(fault, layer) else "na"
            else:
                klass = "ok" if cell.passed == cell.runs else "some" if cell.passed else "bad"
                klass += "" if cell.real else " lab"
                text = f"<a href='#{_anchor(fault, layer)}'>{text}</a>"
            if (fault, layer) in failing:
                klass = "bad"
            if (fault, layer) in tampered:
                klass = "bad tampered"
            if (fault, layer) in required:
                klass += " req"
            title = "" if cell is None else (
                f" title='{cell.scenarios} scenarios, RTO p95 {_seconds(cell.rto_p95)}, "
                f"injected at {', '.join(cell.injected_at)}'")
            cells.append(f"<td class='c {klass}'{title}>{text}</td>")
        body.append(f"<tr><th>{html.escape(fault)}</th>{''.join(cells)}</tr>")
    audit = "".join(f"<tr><td>{html.escape(family)}</td><td>{layer}</td><td>{kind}</td>"
                    f"<td class=c>{count}</td></tr>"
                    for family, layer, kind, count in matrix.audit_rows())
    details = []
    for cell in _sorted_cells(matrix):
        data = cell.to_json()
        runs = "<br>".join(_run_link(path, sha) for sha, path in cell.evidence[:10])
        if len(cell.evidence) > 10:
            runs += f"<br>… and {len(cell.evidence) - 10} more"
        details.append(
            f"<tr id='{_anchor(cell.fault, cell.layer)}'><td>{html.escape(cell.fault)}</td>"
            f"<td>{cell.layer}</td>"
            f"<td class=c>{cell.scenarios}</td><td class=c>{cell.passing_scenarios}</td>"
            f"<td class=c>{cell.runs}</td><td class=c>{cell.passed}</td>"
            f"<td>{data['last_run'] or '-'}</td><td class=c>{_seconds(cell.rto_p50)}</td>"
            f"<td class=c>{_seconds(cell.rto_p95)}</td>"
            f"<td>{html.escape(', '.join(cell.injected_at))}</td>"
            f"<td>{html.escape(', '.join(cell.targets))}</td>"
            f"<td>{html.escape(_requirement_of(matrix, cell))}</td><td class=runs>{runs}</td>"
            "</tr>")
    findings = "".join(f"<li>{html.escape(f.line())}</li>" for f in matrix.findings)
    verdict = ("" if not matrix.requirements else
               f"<p class=verdict><b>{html.escape(matrix.requirements_line())}</b></p>"
               + (f"<ul>{findings}</ul>" if findings else ""))
    rejected = ("" if not matrix.rejected else
                f"<h2>Rejected journals ({len(matrix.rejected)}, not counted)</h2><ul>"
                + "".join(f"<li><code>{html.escape(r.path)}</code>: {html.escape(r.reason)}"
                          "</li>" for r in matrix.rejected) + "</ul>")
    if matrix.chain_problems:
        rejected += (f"<h2>Chain problems ({len(matrix.chain_problems)})</h2><ul>"
                     + "".join(f"<li>{html.escape(problem)}</li>"
                               for problem in matrix.chain_problems) + "</ul>")
    legend = ("<dl class=legend><dt class=ok>2/2</dt><dd>passed/run, verified journals from a "
              "real target</dd><dt class='ok lab'>2/2 (lab)</dt><dd>evidence from the virtual "
              "lab only</dd><dt class=some>1/2</dt><dd>some runs failed</dd>"
              "<dt class=bad>0/2</dt><dd>every run failed, or a required cell is unmet</dd>"
              f"<dt class=none>{NOT_COVERED}</dt><dd>not covered yet</dd>"
              f"<dt class=na>{NOT_APPLICABLE}</dt><dd>the kind cannot act at this layer</dd>"
              "<dt class=req>outlined</dt><dd>required by the requirement file</dd>"
              f"<dt class='bad tampered'>{TAMPERED} (1)</dt><dd>journals of the cell did not "
              "verify (edited, removed, re-signed or rolled back): not counted</dd></dl>")
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        "<meta http-equiv='Content-Security-Policy' content=\"default-src 'none'; "
        "style-src 'unsafe-inline'\">"
        f"<title>gameday coverage</title><style>{_HTML_STYLE}</style></head><body>"
        f"<h1>Coverage matrix</h1><p class=scope>{html.escape(matrix.scope_line())}</p>"
        f"{legend}{verdict}{_score_html(score)}"
        f"<div class=scroll><table><tr><th>fault kind</th>{head}</tr>{''.join(body)}</table>"
        "</div>"
        "<h2>Verified scenarios by fault family</h2><table><tr><th>fault family</th>"
        f"<th>layer</th><th>kind</th><th>verified scenarios</th></tr>{audit}</table>"
        "<h2>Cells</h2><div class=scroll><table class=cells><tr><th>fault</th><th>layer</th>"
        "<th>scenarios</th>"
        "<th>passing</th><th>runs</th><th>passed</th><th>last run</th><th>RTO p50</th>"
        "<th>RTO p95</th><th>injected at</th><th>targets</th><th>required</th>"
        "<th>runs: report or journal, sha256</th></tr>"
        f"{''.join(details)}</table></div>{rejected}</body></html>\n")


def render(matrix: Matrix, fmt: str, score: Score | None = None) -> str:
    """The matrix in ``fmt``; the HTML page carries ``score`` too."""
    if fmt not in FORMATS:
        raise InvalidInput(f"--format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    if fmt == "html":
        return to_html(matrix, score)
    return {"md": to_markdown, "csv": to_csv, "json": to_json}[fmt](matrix)
