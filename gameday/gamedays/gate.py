"""``gameday gate``: a release gate over a playbook run — exit code, JUnit XML, a summary.

The gate passes (exit 0) only when every experiment ended as the playbook expected and
every SLO held:

- an experiment expected to pass must pass (its own verdict: steady states, faults,
  verifiers, the SLOs in its ``gameday`` extension); one that was skipped (``on_failure:
  stop``) or could not run (bad input) fails the gate;
- an experiment marked ``expect: fail`` (a known weakness) must still fail; if it passes
  the gate fails too, so the playbook is updated when the weakness is fixed (strict
  xfail);
- the playbook's ``gate`` thresholds hold over the experiments expected to pass:
  ``rto_max_s`` (worst RTO), ``rto_p95_s``, ``rpo_max_s`` (worst seconds of training
  lost, from ``rpo.checkpoint_loss``), ``reshard_max_s``, ``detect_max_s``,
  ``min_pass_rate`` and ``min_ettr`` (the effective training time ratio projected from
  the worst measured RTO onto the playbook's fleet, see ``gameday.gamedays.costs``). A threshold
  with nothing measured to compare fails: an unmeasured SLO did not hold.

JUnit XML has one testcase per experiment, one per verifier result and one per gate
threshold; a failure's message says which SLO missed by how much.

The gate judges either the runs it has just made or journals that already exist
(:func:`runs_from_journals`: experiments run in one CI job, gated in another). Either way
only verified journals count (their hash chain and, with a trusted key, signatures): an
experiment whose journal does not verify did not pass.
"""

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from xml.sax.saxutils import escape, quoteattr

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from gameday.atomic import replace_file, shareable_mode
from gameday.errors import InvalidInput
from gameday.evidence.audit import verify_tree
from gameday.evidence.summary import JournalSummary, is_journal_file, read_summary
from gameday.gamedays.costs import CostProjection, no_projection, project
from gameday.gamedays.play import ExperimentRun
from gameday.gamedays.playbook import Gate, PlannedExperiment, Playbook
from gameday.stats import percentile, plural


@dataclass
class Case:
    """One JUnit testcase."""

    classname: str
    name: str
    status: str  # passed | failed | error | skipped | xfail
    message: str = ""
    detail: str = ""
    time_s: float = 0.0


@dataclass
class GateVerdict:
    title: str
    cases: list[Case] = field(default_factory=list)
    projection: CostProjection | None = None
    median_projection: CostProjection | None = None

    @property
    def failures(self) -> list[Case]:
        return [c for c in self.cases if c.status in ("failed", "error")]

    @property
    def passed(self) -> bool:
        return not self.failures

    @property
    def exit_code(self) -> int:
        return 0 if self.passed else 1

    def count(self, *statuses: str) -> int:
        return sum(1 for c in self.cases if c.status in statuses)


def _experiment_case(run: ExperimentRun, classname: str) -> Case:
    planned, summary = run.planned, run.summary
    time_s = summary.duration_s if summary else 0.0
    case = Case(classname, planned.name, "passed", time_s=time_s)
    reasons = "; ".join(summary.reasons) if summary else run.error
    if run.outcome == "skipped":
        case.status, case.message = "failed", "not run: skipped after an earlier failure " \
                                              "(on_failure: stop)"
    elif run.outcome == "error":
        case.status, case.message = "error", f"could not run: {run.error or 'no journal'}"
    elif run.outcome == "interrupted":
        case.status, case.message = "error", f"interrupted (exit {run.exit_code})"
    elif planned.expect == "fail" and run.outcome == "passed":
        case.status = "failed"
        case.message = ("expected to fail (a known weakness) but passed: the weakness looks "
                        "fixed, change expect: fail to pass in the playbook")
    elif planned.expect == "fail":
        case.status, case.message = "xfail", f"failed as expected: {reasons}"
    elif run.outcome == "failed":
        case.status, case.message = "failed", reasons or "failed"
    case.detail = (f"experiment {planned.path}\njournal {run.journal_path}\n"
                   f"sha256 {summary.sha256 if summary else '-'}")
    return case


def _verifier_cases(run: ExperimentRun, classname: str) -> list[Case]:
    if run.summary is None:
        return []
    cases: list[Case] = []
    seen: dict[str, int] = {}
    for line in run.summary.verifiers:
        label = f"{line.name} ({line.verifier})" if line.name != line.verifier else line.name
        seen[label] = seen.get(label, 0) + 1
        name = label if seen[label] == 1 else f"{label} #{seen[label]}"
        case = Case(f"{classname}.{run.planned.name}", name, "passed", detail=line.reason)
        if line.passed is False:
            if run.planned.expect == "fail":
                case.status, case.message = "xfail", f"expected failure: {line.reason}"
            else:
                case.status, case.message = "failed", line.reason or "failed"
        cases.append(case)
    return cases


def _bound(classname: str, key: str, label: str, values: list[tuple[str, float]],
           limit: float | None, *, use_p95: bool = False) -> Case | None:
    if limit is None:
        return None
    name = f"{key}: {label} <= {limit:g} s"
    if not values:
        return Case(classname, name, "failed", f"gate.{key}: no {label} was measured, so the "
                                               f"{limit:g} s objective did not hold")
    if use_p95:
        measured = percentile([v for _, v in values], 0.95)
        where = f"p95 over {len(values)} runs"
    else:
        where, measured = max(values, key=lambda item: item[1])
    if measured <= limit:
        return Case(classname, name, "passed", detail=f"{label} {measured:.2f} s ({where})")
    return Case(classname, name, "failed",
                f"gate.{key}: {label} {measured:.2f} s ({where}) > {limit:g} s "
                f"(missed by {measured - limit:.2f} s)")


def _threshold_cases(gate: Gate, runs: Sequence[ExperimentRun], classname: str,
                     projection: CostProjection | None) -> list[Case]:
    measured = [r for r in runs if r.planned.expect == "pass" and r.summary is not None]

    def values(attribute: str) -> list[tuple[str, float]]:
        found = []
        for run in measured:
            value = getattr(run.summary, attribute)
            if value is not None:
                found.append((run.planned.name, float(value)))
        return found

    rtos = values("rto_s")
    cases = [
        _bound(classname, "rto_max_s", "RTO", rtos, gate.rto_max_s),
        _bound(classname, "rto_p95_s", "RTO", rtos, gate.rto_p95_s, use_p95=True),
        _bound(classname, "rpo_max_s", "RPO (training lost)", values("rpo_s"), gate.rpo_max_s),
        _bound(classname, "reshard_max_s", "time to re-shard", values("reshard_s"),
               gate.reshard_max_s),
        _bound(classname, "detect_max_s", "time to detect", values("detect_s"),
               gate.detect_max_s),
    ]
    if gate.min_pass_rate is not None:
        rate = sum(r.as_expected for r in runs) / len(runs) if runs else 0.0
        name = f"min_pass_rate: {gate.min_pass_rate:.0%} of experiments as expected"
        cases.append(Case(classname, name, "passed" if rate >= gate.min_pass_rate else "failed",
                          "" if rate >= gate.min_pass_rate else
                          f"gate.min_pass_rate: {rate:.0%} < {gate.min_pass_rate:.0%} "
                          f"(short by {gate.min_pass_rate - rate:.0%})"))
    if gate.min_ettr is not None:
        name = f"min_ettr: projected ETTR >= {gate.min_ettr:g}"
        if projection is None:
            cases.append(Case(classname, name, "failed", "gate.min_ettr: no RTO was measured "
                                                         "to project"))
        elif projection.ettr >= gate.min_ettr:
            cases.append(Case(classname, name, "passed", detail=projection.line()))
        else:
            cases.append(Case(classname, name, "failed",
                              f"gate.min_ettr: projected ETTR {projection.ettr:.5f} < "
                              f"{gate.min_ettr:g} (short by "
                              f"{gate.min_ettr - projection.ettr:.5f}): {projection.line()}"))
    return [c for c in cases if c is not None]


def projections(playbook: Playbook, runs: Sequence[ExperimentRun]
                ) -> tuple[CostProjection | None, CostProjection | None]:
    """What the worst and the median RTO cost at the playbook's fleet size.

    The RPO is the worst measured one (``rpo.checkpoint_loss``'s seconds of training
    lost), or the playbook's ``costs.rpo_s`` when no experiment measured one.
    """
    measured = [r.summary for r in runs if r.planned.expect == "pass" and r.summary]
    rtos = [s.rto_s for s in measured if s.rto_s is not None]
    if not rtos or no_projection(playbook.fleet):
        return None, None
    rpo = max((s.rpo_s for s in measured if s.rpo_s is not None), default=playbook.rpo_s)
    return (project(max(rtos), rpo, playbook.fleet),
            project(percentile(rtos, 0.5), rpo, playbook.fleet))


def _same_experiment(planned: PlannedExperiment, summary: JournalSummary) -> bool:
    recorded = Path(summary.experiment_file)
    return recorded.resolve() == planned.path.resolve() or recorded.name == planned.path.name


def runs_from_journals(playbook: Playbook, directory: Path,
                       trusted: Ed25519PublicKey | None = None
                       ) -> tuple[list[ExperimentRun], dict[Path, str]]:
    """The playbook's experiments as the newest verified journal under ``directory`` shows
    each one; and the journals that did not verify, with the reason.

    An experiment with no verified journal is an error run ("no verified journal").
    Raises :class:`InvalidInput` when ``directory`` holds no gameday journal at all.
    """
    if not directory.is_dir():
        raise InvalidInput("is not a directory of journals", file=str(directory))
    verdicts = verify_tree(directory, trusted, is_journal=is_journal_file)
    verified: list[tuple[Path, JournalSummary]] = []
    rejected: dict[Path, str] = {}
    for path, problem in verdicts.items():
        try:
            summary = read_summary(path)
        except InvalidInput:
            continue
        if problem is None:
            verified.append((path, summary))
        else:
            rejected[path] = problem
    if not verified and not rejected:
        raise InvalidInput("holds no gameday journal", file=str(directory))
    runs = []
    for planned in playbook.experiments:
        mine = [(p, s) for p, s in verified if _same_experiment(planned, s)]
        if not mine:
            why = "no verified journal of this experiment in " + str(directory)
            runs.append(ExperimentRun(planned, exit_code=2, error=why))
            continue
        path, summary = max(mine, key=lambda item: item[1].ended_at)
        runs.append(ExperimentRun(planned, exit_code=summary.exit_code, journal_path=path,
                                  summary=summary))
    return runs, rejected


def reject_unverified(runs: Sequence[ExperimentRun], trusted: Ed25519PublicKey | None = None
                      ) -> dict[Path, str]:
    """Check the journals of runs just made; a run whose journal does not verify becomes an
    error run. Returns the rejected journals with their reasons."""
    rejected: dict[Path, str] = {}
    for directory in sorted({run.journal_path.parent for run in runs if run.journal_path}):
        verdicts = verify_tree(directory, trusted, is_journal=is_journal_file)
        for run in runs:
            problem = verdicts.get(run.journal_path) if run.journal_path else None
            if run.journal_path is not None and problem is not None:
                rejected[run.journal_path] = problem
                run.summary, run.error = None, f"journal did not verify: {problem}"
    return rejected


def evaluate(playbook: Playbook, runs: Sequence[ExperimentRun]) -> GateVerdict:
    """Judge a playbook run: every experiment as expected, every SLO held."""
    classname = f"gameday.{playbook.slug}"
    verdict = GateVerdict(playbook.title)
    verdict.projection, verdict.median_projection = projections(playbook, runs)
    for run in runs:
        verdict.cases.append(_experiment_case(run, classname))
        verdict.cases.extend(_verifier_cases(run, classname))
    verdict.cases.extend(_threshold_cases(playbook.gate, runs, f"{classname}.gate",
                                          verdict.projection))
    if not runs:
        verdict.cases.append(Case(classname, "experiments", "failed", "no experiment ran"))
    return verdict


_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f]")


def _clean(text: str) -> str:
    """XML 1.0 cannot hold most control characters; drop them."""
    return _CONTROL.sub("", text)


def junit_xml(verdict: GateVerdict) -> bytes:
    """JUnit XML (the schema CI systems read): xfail is reported as skipped.

    Written directly (escaped with ``xml.sax.saxutils``) rather than through
    ElementTree, which is several times slower on a 10,000-experiment gate.
    """
    failures, errors = verdict.count("failed"), verdict.count("error")
    skipped = verdict.count("skipped", "xfail")
    total_time = sum(c.time_s for c in verdict.cases)
    counts = (f'tests="{len(verdict.cases)}" failures="{failures}" errors="{errors}" '
              f'skipped="{skipped}" time="{total_time:.3f}"')
    out = ["<?xml version='1.0' encoding='utf-8'?>",
           f'<testsuites name="gameday gate" {counts}>',
           f"  <testsuite name={quoteattr(verdict.title)} {counts}>"]
    for case in verdict.cases:
        out.append(f"    <testcase classname={quoteattr(case.classname)} "
                   f'name={quoteattr(case.name)} time="{case.time_s:.3f}">')
        body = escape(case.detail or case.message)
        if case.status == "failed":
            out.append(f"      <failure message={quoteattr(case.message)} "
                       f'type="SloMissed">{body}</failure>')
        elif case.status == "error":
            out.append(f"      <error message={quoteattr(case.message)} "
                       f'type="RunError">{body}</error>')
        elif case.status in ("skipped", "xfail"):
            kind = "xfail" if case.status == "xfail" else "skipped"
            out.append(f'      <skipped message={quoteattr(case.message)} type="{kind}"/>')
        if case.detail and case.status in ("passed", "xfail"):
            out.append(f"      <system-out>{escape(case.detail)}</system-out>")
        out.append("    </testcase>")
    out += ["  </testsuite>", "</testsuites>", ""]
    return _clean("\n".join(out)).encode("utf-8")


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown_summary(verdict: GateVerdict, runs: Sequence[ExperimentRun],
                     command: str = "") -> str:
    """A one-screen Markdown summary for a pull-request comment."""
    mark = "✅ passed" if verdict.passed else "❌ failed"
    lines = [f"### Resilience gate {mark}: {_md(verdict.title)}", ""]
    if command:
        lines += [f"`{command}`", ""]
    lines += ["| experiment | expect | outcome | RTO | journal |",
              "|---|---|---|---|---|"]
    for run in runs:
        summary = run.summary
        rto = "-" if summary is None or summary.rto_s is None else f"{summary.rto_s:.2f} s"
        if summary is not None and summary.rto_slo_s is not None and summary.rto_s is not None:
            rto += f" / SLO {summary.rto_slo_s:g} s"
        sha = f"`{summary.sha256[:12]}`" if summary else "-"
        icon = "✅" if run.as_expected else "❌"
        lines.append(f"| {_md(run.planned.name)} | {run.planned.expect} | {icon} "
                     f"{run.outcome} | {rto} | {sha} |")
    thresholds = [c for c in verdict.cases if c.classname.endswith(".gate")]
    if thresholds:
        lines += ["", "| gate threshold | result |", "|---|---|"]
        for case in thresholds:
            result = "✅ " + _md(case.detail) if case.status == "passed" else \
                "❌ " + _md(case.message)
            lines.append(f"| {_md(case.name)} | {result} |")
    if verdict.projection is not None:
        lines += ["", f"**At scale:** {_md(verdict.projection.line())}."]
        median = verdict.median_projection
        if median is not None and median.rto_s != verdict.projection.rto_s:
            lines.append(f"Median RTO: {_md(median.line())}.")
        lines.append(f"{_md(verdict.projection.fleet.assumptions())}.")
    failures = verdict.failures
    if failures:
        lines += ["", f"<details><summary>{plural(len(failures), 'failing check')}</summary>", ""]
        lines += [f"- **{_md(c.classname)} > {_md(c.name)}**: {_md(c.message)}"
                  for c in failures]
        lines += ["", "</details>"]
    expected = [c for c in verdict.cases if c.status == "xfail" and "." not in
                c.classname.removeprefix("gameday.")]
    if expected:
        lines += ["", "Known weaknesses (expected to fail, still failing): " +
                  ", ".join(_md(c.name) for c in expected) + "."]
    counts = (f"{verdict.count('passed')} passed, {len(failures)} failed, "
              f"{verdict.count('xfail')} expected failures")
    lines += ["", f"<sub>{counts} · gameday</sub>", ""]
    return "\n".join(lines)


def write_outputs(verdict: GateVerdict, runs: Sequence[ExperimentRun], *,
                  junit: Path | None, summary: Path | None, command: str = "") -> None:
    mode = shareable_mode()  # shared outputs follow the umask
    if junit is not None:
        replace_file(junit, junit_xml(verdict), mode=mode, durable=True)
    if summary is not None:
        replace_file(summary, markdown_summary(verdict, runs, command).encode(), mode=mode,
                     durable=True)
