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
only verified journals count (their hash chain, the chain head and, with a trusted key,
signatures): an experiment whose newest journal does not verify did not pass (the gate
never falls back to an older passing run), and any journal that does not verify fails
the gate's ``evidence`` check: a rejected journal is evidence of tampering. The head and
sequence number of every chain judged are in the JUnit properties and the summary, for
an auditor to anchor (``gameday audit verify --expect-head/--min-sequence``).
"""

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from xml.sax.saxutils import escape, quoteattr

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from gameday.atomic import replace_file, shareable_mode
from gameday.errors import InvalidInput
from gameday.evidence import checked
from gameday.evidence.audit import AuditResult
from gameday.evidence.index import VerifiedIndex
from gameday.evidence.summary import JournalSummary
from gameday.gamedays.costs import CostProjection, no_projection, project
from gameday.gamedays.play import ExperimentRun
from gameday.gamedays.playbook import Gate, PlannedExperiment, Playbook
from gameday.gamedays.score import Policy as ScorePolicy
from gameday.gamedays.score import Score
from gameday.gamedays.score import compute as compute_score
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


@dataclass(frozen=True)
class ChainRecord:
    """The head of one directory's hash chain as the gate saw it: what to anchor."""

    directory: str
    sha256: str
    sequence: int | None
    signed: bool

    def line(self) -> str:
        sequence = "" if self.sequence is None else f" sequence {self.sequence}"
        return (f"{self.directory}: head {self.sha256}{sequence}"
                + (" (signed)" if self.signed else ""))


def chain_records(chains: dict[Path, AuditResult]) -> list[ChainRecord]:
    return [ChainRecord(str(directory), result.head.sha256, result.head.sequence,
                        result.head_signed)
            for directory, result in sorted(chains.items()) if result.head is not None]


@dataclass
class GateEvidence:
    """The runs the gate judges and what their evidence showed: the journals that did not
    verify (with the reason) and the chains' heads."""

    runs: list[ExperimentRun]
    rejected: dict[Path, str] = field(default_factory=dict)
    chains: list[ChainRecord] = field(default_factory=list)
    #: what the chains themselves showed (a journal missing, one outside the chain, a head
    #: that does not hold), ``DIR: problem``; none when every chain verified
    problems: list[str] = field(default_factory=list)


def chain_problems(chains: dict[Path, AuditResult]) -> list[str]:
    return [f"{directory}: {problem}" for directory, result in sorted(chains.items())
            for problem in result.problems]


@dataclass
class GateVerdict:
    title: str
    cases: list[Case] = field(default_factory=list)
    projection: CostProjection | None = None
    median_projection: CostProjection | None = None
    chains: list[ChainRecord] = field(default_factory=list)

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


class _ByExperiment:
    """Journals grouped by the experiment they ran: a planned experiment is the one a
    journal records when the file names or the resolved paths are the same."""

    def __init__(self, journals: Sequence[tuple[Path, JournalSummary]]) -> None:
        self._by_name: dict[str, list[tuple[Path, JournalSummary]]] = {}
        self._by_path: dict[Path, list[tuple[Path, JournalSummary]]] = {}
        known: dict[str, tuple[str, Path]] = {}  # recorded -> (file name, resolved path)
        for item in journals:
            recorded = item[1].experiment_file
            if recorded not in known:
                known[recorded] = (Path(recorded).name, Path(recorded).resolve())
            name, resolved = known[recorded]
            self._by_name.setdefault(name, []).append(item)
            self._by_path.setdefault(resolved, []).append(item)

    def of(self, planned: PlannedExperiment) -> list[tuple[Path, JournalSummary]]:
        found = {id(item): item for item in self._by_name.get(planned.path.name, [])}
        found.update((id(item), item) for item in self._by_path.get(planned.path.resolve(), []))
        return list(found.values())


def runs_from_journals(playbook: Playbook, directory: Path,
                       trusted: Ed25519PublicKey | None = None,
                       index: VerifiedIndex | None = None) -> GateEvidence:
    """The playbook's experiments as the newest journal under ``directory`` shows each one,
    and the journals that did not verify, with the reason.

    An experiment with no verified journal is an error run ("no verified journal"); so is
    one whose newest journal did not verify ("evidence rejected"): an older passing run
    never stands in for it. Raises :class:`InvalidInput` when ``directory`` holds no
    gameday journal at all.
    """
    evidence = checked.check(directory, trusted, index)
    verified = evidence.verified
    rejected = {j.path: str(j.problem) for j in evidence.rejected}
    if not verified and not rejected:
        raise InvalidInput("holds no gameday journal", file=str(directory))
    runs = []
    by_experiment = _ByExperiment(verified)
    problems = {j.path: str(j.problem) for j in evidence.rejected}
    rejected_by_experiment = _ByExperiment([(j.path, j.summary) for j in evidence.rejected
                                            if j.summary is not None])
    for planned in playbook.experiments:
        mine = by_experiment.of(planned)
        newest_ok = max((s.ended_at for _, s in mine), default=None)
        newer_rejected = [(p, s) for p, s in rejected_by_experiment.of(planned)
                          if newest_ok is None or s.ended_at >= newest_ok]
        if newer_rejected:
            worst, _ = max(newer_rejected, key=lambda item: item[1].ended_at)
            why = f"evidence rejected: its newest journal {worst} did not verify: " \
                  f"{problems[worst]}"
            runs.append(ExperimentRun(planned, exit_code=2, error=why))
            continue
        if not mine:
            why = "no verified journal of this experiment in " + str(directory)
            runs.append(ExperimentRun(planned, exit_code=2, error=why))
            continue
        path, summary = max(mine, key=lambda item: item[1].ended_at)
        runs.append(ExperimentRun(planned, exit_code=summary.exit_code, journal_path=path,
                                  summary=summary))
    return GateEvidence(runs, rejected, chain_records(evidence.chains),
                        chain_problems(evidence.chains))


def reject_unverified(runs: Sequence[ExperimentRun], trusted: Ed25519PublicKey | None = None
                      ) -> GateEvidence:
    """Check the journals of runs just made; a run whose journal does not verify becomes an
    error run. Returns the runs with the rejected journals (of those directories, whoever
    made them) and the chains' heads."""
    rejected: dict[Path, str] = {}
    chains: dict[Path, AuditResult] = {}
    for directory in sorted({run.journal_path.parent for run in runs if run.journal_path}):
        evidence = checked.check(directory, trusted)
        chains.update(evidence.chains)
        verdicts = {j.path: j.problem for j in evidence.journals}
        rejected.update({j.path: str(j.problem) for j in evidence.rejected})
        for run in runs:
            problem = verdicts.get(run.journal_path) if run.journal_path else None
            if run.journal_path is not None and problem is not None:
                rejected[run.journal_path] = problem
                run.summary, run.error = None, f"journal did not verify: {problem}"
    return GateEvidence(list(runs), rejected, chain_records(chains), chain_problems(chains))


def _evidence_case(classname: str, evidence: GateEvidence) -> Case:
    """The failed ``evidence`` check (there is one only when a journal or a chain did not
    verify): tampering, or evidence that cannot be told from it."""
    name = "evidence: every journal and chain verifies"
    lines = evidence.problems + [f"{p}: {r}" for p, r in sorted(evidence.rejected.items())]
    more = f" (and {len(lines) - 1} more)" if len(lines) > 1 else ""
    rejected = len(evidence.rejected)
    return Case(classname, name, "failed",
                f"evidence rejected: {plural(rejected, 'journal')} did not verify, "
                f"{plural(len(evidence.problems), 'chain problem')}, a sign of tampering: "
                f"{lines[0]}{more}", detail="\n".join(lines))


def _score_case(classname: str, score: Score, min_score: float) -> Case:
    name = f"min_score: resilience score >= {min_score:g}"
    value = score.overall.value
    if value is None:
        return Case(classname, name, "failed", "gate.min_score: no verified journal and no "
                                               "requirement to score")
    detail = (f"resilience score {value:.1f} over {len(score.overall.points)} points "
              "(gameday score)")
    if value >= min_score:
        return Case(classname, name, "passed", detail=detail)
    return Case(classname, name, "failed",
                f"gate.min_score: resilience score {value:.1f} < {min_score:g} (short by "
                f"{min_score - value:.1f})", detail=detail)


def score_of(playbook: Playbook, runs: Sequence[ExperimentRun],
             evidence: GateEvidence | None, now: float,
             policy: ScorePolicy | None = None) -> Score:
    """The resilience score of the runs the gate judges (their verified journals) against
    the playbook's coverage requirements; rejected journals listed, never counted."""
    return compute_score([run.summary for run in runs if run.summary is not None],
                         rejected=[(str(p), r) for p, r in sorted(
                             (evidence.rejected if evidence else {}).items())],
                         requirements=playbook.requirements, policy=policy, now=now)


def evaluate(playbook: Playbook, runs: Sequence[ExperimentRun],
             evidence: GateEvidence | None = None, *, score: Score | None = None,
             min_score: float | None = None) -> GateVerdict:
    """Judge a playbook run: every experiment as expected, every SLO held, (given its
    ``evidence``) every journal verified, and (given ``min_score``) the ``score`` high
    enough."""
    classname = f"gameday.{playbook.slug}"
    verdict = GateVerdict(playbook.title, chains=evidence.chains if evidence else [])
    verdict.projection, verdict.median_projection = projections(playbook, runs)
    for run in runs:
        verdict.cases.append(_experiment_case(run, classname))
        verdict.cases.extend(_verifier_cases(run, classname))
    verdict.cases.extend(_threshold_cases(playbook.gate, runs, f"{classname}.gate",
                                          verdict.projection))
    if min_score is not None and score is not None:
        verdict.cases.append(_score_case(f"{classname}.gate", score, min_score))
    if evidence is not None and (evidence.rejected or evidence.problems):
        verdict.cases.append(_evidence_case(f"{classname}.gate", evidence))
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
    if verdict.chains:
        out.append("    <properties>")
        out += [f'      <property name="gameday.chain_head" value={quoteattr(chain.line())}/>'
                for chain in verdict.chains]
        out.append("    </properties>")
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
    if verdict.chains:
        lines += ["", "**Evidence** (anchor with `gameday audit verify DIR --expect-head SHA "
                      "--min-sequence N`):"]
        lines += [f"- `{_md(chain.line())}`" for chain in verdict.chains]
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
