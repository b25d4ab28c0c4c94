"""The game-day commands of the CLI: play, gate, schedule, coverage, report.

``gameday.cli.main`` adds each with its ``add_<command>`` and dispatches with ``dispatch``.
Exit codes as everywhere: 0 passed, 1 failed (an experiment, an SLO, a required
coverage cell), 2 invalid input (nothing injected), 130/143 interrupted.
"""

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from gameday.gamedays.play import PlaybookRun
    from gameday.gamedays.playbook import Playbook

from gameday import IMAGE
from gameday.cli.output import add_output_argument, emit, wants_json
from gameday.cli.parsers import command
from gameday.cli.results import add_arguments as add_result_arguments
from gameday.cli.results import publisher
from gameday.stats import plural
from gameday.targets import agent_tls

COMMANDS = ("play", "gate", "schedule", "coverage", "score", "report")


def _fleet_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--fleet-gpus", type=int, metavar="N",
                        help="the training fleet the run stands for, to project its cost "
                             "onto (default: a playbook's costs.fleet_gpus; none: no "
                             "projection)")
    parser.add_argument("--interruptions-per-gpu-day", type=float, metavar="RATE",
                        help="interruption rate (default: Llama 3's, 419 / 54 days / 16384)")
    parser.add_argument("--workload", choices=("training", "serving"),
                        help="what the fleet runs (default training; serving: nothing is "
                             "projected, the model is synchronous training's)")


def _index_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--index", type=Path, metavar="FILE",
                        help="keep a verified index in FILE (default $GAMEDAY_EVIDENCE_INDEX; "
                             "none: verify every journal): only new or changed journals are "
                             "read; keep it where the journals' writers cannot write")


def _score_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--half-life-days", type=float, default=30.0, metavar="DAYS",
                        help="a passing run's points halve every DAYS (default 30)")
    parser.add_argument("--weights", default="warning=1,critical=3", metavar="SEV=W,...",
                        help="weight per SLO severity (tag severity:NAME; default "
                             "warning=1,critical=3)")
    parser.add_argument("--service-tag", default="service:", metavar="PREFIX",
                        help="the experiment tag naming its service (default service:)")
    parser.add_argument("--services", type=Path, metavar="FILE",
                        help="configured services: YAML 'services: {NAME: [GLOB, ...]}' over "
                             "experiment files (before the tags)")


def _policy(args: argparse.Namespace) -> Any:
    from gameday.gamedays.score import Policy, load_services, parse_weights

    return Policy(weights=parse_weights(args.weights), half_life_days=args.half_life_days,
                  service_tag=args.service_tag,
                  services=load_services(args.services) if args.services else ())


def _draw_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seed", type=int, metavar="N",
                        help="seed the playbook's draw from its fault mix (default: its own)")
    parser.add_argument("--dry-run", action="store_true",
                        help="show what would run (experiments, order, the draw and its seed) "
                             "and stop; nothing is started or injected")


def _load(args: argparse.Namespace) -> "Playbook":
    """The playbook, with ``--seed`` applied to its draw."""
    import dataclasses

    from gameday.errors import InvalidInput
    from gameday.gamedays.playbook import load_playbook

    playbook = load_playbook(args.playbook)
    if args.seed is not None:
        if playbook.draw is None:
            raise InvalidInput("--seed: the playbook has no draw from a fault mix to seed",
                               file=str(args.playbook))
        playbook.draw = dataclasses.replace(playbook.draw, seed=args.seed)
    return playbook


def _show_plan(playbook: "Playbook", args: argparse.Namespace) -> int:
    """``--dry-run``: the experiments in order, where each comes from, and the draw."""
    planned = playbook.plan()
    draw = playbook.draw
    rows: list[dict[str, Any]] = [
        {"position": n, "name": p.name, "experiment": str(p.path), "expect": p.expect,
         "drawn_from": p.drawn_from, "variables": dict(p.variables)}
        for n, p in enumerate(planned, start=1)]
    document = {"playbook": str(args.playbook), "title": playbook.title,
                "target": playbook.target, "on_failure": playbook.on_failure,
                "draw": ({"mix": str(draw.mix.path), "count": draw.count, "seed": draw.seed}
                         if draw else None),
                "experiments": rows}
    if wants_json(args):
        emit(document, sys.stdout)
        return 0
    print(f"{args.command}: {playbook.title}: {len(planned)} experiment"
          f"{'' if len(planned) == 1 else 's'} in this order (dry run: nothing runs)")
    for item in rows:
        origin = f"  [drawn: {item['drawn_from']}]" if item["drawn_from"] else ""
        print(f"  {item['position']}. {item['name']}: {item['experiment']} expect "
              f"{item['expect']}{origin}")
    if draw is not None:
        print(f"  drawn from {draw.mix.path} ({draw.count} experiments, seed {draw.seed}; "
              f"the same seed draws the same experiments)")
    return 0


def add_play(commands: Any) -> None:
    """Add ``gameday play`` to the ``gameday`` parser's subparsers (as each ``add_*``)."""
    play = command(commands, "play", "run a playbook (a game day)",
                   "gameday play playbooks/weekly-gameday.yaml --output json > record.json")
    play.add_argument("playbook", type=Path, help="the playbook (YAML)")
    play.add_argument("--journal-dir", type=Path, metavar="DIR",
                      help="where the journals go (default journals/<stamp>-<playbook>)")
    play.add_argument("--lab-dir", type=Path, metavar="DIR", help="lab directory")
    play.add_argument("--sign-key", type=Path, metavar="KEY",
                      help="sign every journal and the record with this Ed25519 key "
                           "(gameday audit keygen)")
    _draw_arguments(play)
    add_output_argument(play)
    add_result_arguments(play)
    agent_tls.add_arguments(play)


def add_gate(commands: Any) -> None:
    gate = command(commands, "gate", "run a playbook as a release gate, or judge existing "
                                     "journals (--journals DIR)",
                   "gameday gate playbooks/release-gate.yaml --junit gate.xml")
    gate.add_argument("playbook", type=Path, help="the playbook (YAML) with its gate")
    gate.add_argument("--journal-dir", type=Path, metavar="DIR",
                      help="where the journals go (default journals/<stamp>-<playbook>)")
    gate.add_argument("--journals", type=Path, metavar="DIR",
                      help="judge the newest verified journal of each experiment under DIR "
                           "instead of running them")
    gate.add_argument("--public-key", type=Path, metavar="KEY.pub",
                      help="count only journals signed by this Ed25519 key")
    _index_argument(gate)
    gate.add_argument("--lab-dir", type=Path, metavar="DIR", help="lab directory")
    _draw_arguments(gate)
    gate.add_argument("--junit", type=Path, metavar="FILE", help="write JUnit XML")
    gate.add_argument("--summary", type=Path, metavar="FILE",
                      help="write a Markdown summary (for a pull-request comment)")
    gate.add_argument("--min-score", type=float, metavar="N",
                      help="also fail unless the resilience score (gameday score) of the "
                           "judged runs is at least N (0-100)")
    _score_arguments(gate)
    gate.add_argument("--sign-key", type=Path, metavar="KEY",
                      help="sign every journal and the record with this Ed25519 key")
    add_output_argument(gate)
    add_result_arguments(gate)
    agent_tls.add_arguments(gate)


def add_schedule(commands: Any) -> None:
    schedule = command(commands, "schedule", "a playbook's schedule as cron",
                       "gameday schedule playbooks/weekly-gameday.yaml --emit crontab "
                       "| crontab -")
    schedule.add_argument("playbook", type=Path, help="the playbook (YAML) with a schedule")
    schedule.add_argument("--emit", choices=["cronjob", "crontab"], required=True,
                          help="a Kubernetes CronJob manifest, or a crontab line for this host")
    schedule.add_argument("--image", metavar="IMAGE",
                          help=f"container image (cronjob; default {IMAGE})")
    schedule.add_argument("--namespace", default="gameday-system",
                          help="namespace (cronjob; default gameday-system)")


def add_coverage(commands: Any) -> None:
    coverage = command(commands, "coverage", "fault x layer coverage from journals",
                       "gameday coverage journals/ --format html -o coverage.html")
    coverage.add_argument("directory", type=Path, help="journals (searched recursively)")
    coverage.add_argument("--format", choices=["md", "html", "csv", "json"], default="md",
                          help="the matrix's format (default md)")
    coverage.add_argument("--require", type=Path, metavar="FILE",
                          help="playbook or requirement file with coverage.require")
    coverage.add_argument("-o", "--output", type=Path, metavar="FILE",
                          help="where to write (default standard output)")
    coverage.add_argument("--public-key", type=Path, metavar="KEY.pub",
                          help="count only journals signed by this Ed25519 key")
    coverage.add_argument("--exclude-lab", action="store_true",
                          help="leave out evidence from the virtual lab")
    _index_argument(coverage)


def add_score(commands: Any) -> None:
    score = command(commands, "score", "a resilience score per service, per coverage cell "
                                       "and overall, from verified journals only",
                    "gameday score journals/ --require playbooks/audit-coverage.yaml "
                    "--public-key keys/gameday.key.pub")
    score.add_argument("directory", type=Path, help="journals (searched recursively)")
    score.add_argument("--require", type=Path, metavar="FILE",
                       help="playbook or requirement file: required scenarios not run count "
                            "as zero")
    score.add_argument("--public-key", type=Path, metavar="KEY.pub",
                       help="count only journals signed by this Ed25519 key")
    _score_arguments(score)
    _index_argument(score)
    add_output_argument(score)
    add_result_arguments(score)


def add_report(commands: Any) -> None:
    report = command(commands, "report", "render a journal, or a game day's record "
                                         "(*.playbook.json), as HTML or Markdown",
                     "gameday report journals/20261201T101500Z-gpu-ecc.json "
                     "(writes journals/20261201T101500Z-gpu-ecc.html)")
    report.add_argument("journal", type=Path, help="a journal or a playbook run record")
    report.add_argument("--format", choices=["html", "md"], default="html",
                        help="html (default, self-contained) or md")
    report.add_argument("-o", "--output", type=Path, metavar="FILE",
                        help="where to write (default: next to the input, .html or .md; "
                             "'-' for standard output)")
    _fleet_arguments(report)


def _fleet(args: argparse.Namespace, default: Any = None) -> Any:
    from gameday.gamedays.costs import Fleet

    base = default or Fleet()
    gpus = getattr(args, "fleet_gpus", None)
    rate = getattr(args, "interruptions_per_gpu_day", None)
    workload = getattr(args, "workload", None)
    if gpus is None and rate is None and workload is None:
        return base
    return Fleet(gpus=gpus or base.gpus,
                 interruptions_per_gpu_day=base.interruptions_per_gpu_day if rate is None
                 else rate,
                 source=base.source if rate is None else "--interruptions-per-gpu-day",
                 workload=workload or base.workload, stated=base.stated or gpus is not None)


def _write(text: str, output: Path | None) -> None:
    if output is None:
        sys.stdout.write(text)
        return
    from gameday.atomic import replace_file, shareable_mode

    replace_file(output, text.encode(), mode=shareable_mode(), durable=True)
    print(f"wrote {output}", file=sys.stderr)


def _lab_dir(args: argparse.Namespace) -> Path | None:
    return args.lab_dir.absolute() if getattr(args, "lab_dir", None) else None


def _played(args: argparse.Namespace, *, verdict_line: bool = True) -> "PlaybookRun":
    """Load and play ``args.playbook`` with live progress on stdout, each run's verdict
    table after it, and the game day's table at the end; the ``PlaybookRun``."""
    from gameday.gamedays.gate import projections
    from gameday.gamedays.play import play
    from gameday.report.terminal import PlaybookRow, console_for, print_playbook, print_run

    playbook = _load(args)
    console = console_for(_people(args))
    results = publisher(args)
    result = play(playbook, console=console, journal_dir=args.journal_dir,
                  lab_dir=_lab_dir(args), on_summary=results.publish if results else None,
                  sign_key=args.sign_key,
                  show_run=lambda outcome, out: print_run(outcome.journal,
                                                          outcome.journal_path, out))
    rows = [PlaybookRow(run.planned.name, run.planned.expect, run.outcome, run.as_expected,
                        run.summary.rto_s if run.summary else None,
                        run.summary.sha256[:16] if run.summary else run.error[:60])
            for run in result.runs]
    worst, _ = projections(result.playbook, result.runs)
    print_playbook(playbook.title, rows, console,
                   at_scale=worst.line() if worst is not None else None,
                   exit_code=result.exit_code, interrupted=result.interrupted_exit is not None,
                   record_path=result.record_path, verdict_line=verdict_line)
    return result


def _people(args: argparse.Namespace) -> TextIO:
    """Where the text for people goes: stdout, or stderr when stdout carries JSON."""
    return sys.stderr if wants_json(args) else sys.stdout


def _play(args: argparse.Namespace) -> int:
    if args.dry_run:
        return _show_plan(_load(args), args)
    result = _played(args)
    if wants_json(args):
        emit({**result.to_json(), "record": str(result.record_path) if result.record_path
              else None}, sys.stdout)
    return result.exit_code


def _gate(args: argparse.Namespace) -> int:
    from gameday.evidence import signing
    from gameday.evidence.index import open_index
    from gameday.gamedays.gate import (
        evaluate,
        reject_unverified,
        runs_from_journals,
        write_outputs,
    )

    if args.dry_run:
        return _show_plan(_load(args), args)
    trusted = signing.load_public(args.public_key) if args.public_key else None
    if args.journals is not None:
        playbook = _load(args)
        evidence = runs_from_journals(playbook, args.journals, trusted,
                                      open_index(args.index, trusted))
    else:
        result = _played(args, verdict_line=False)
        if result.interrupted_exit is not None:
            return result.interrupted_exit
        playbook = result.playbook
        evidence = reject_unverified(result.runs, trusted)
    runs, rejected = evidence.runs, evidence.rejected
    out = _people(args)
    for path, reason in rejected.items():
        print(f"gate: rejected {path}: {reason}", file=out)
    for chain in evidence.chains:
        print(f"evidence: {chain.line()}", file=out)
    score = None
    if args.min_score is not None:
        import time

        from gameday.gamedays.gate import score_of

        score = score_of(playbook, runs, evidence, time.time(), _policy(args))
    verdict = evaluate(playbook, runs, evidence, score=score, min_score=args.min_score)
    write_outputs(verdict, runs, junit=args.junit, summary=args.summary,
                  command=f"gameday gate {args.playbook}")
    for case in verdict.failures:
        print(f"gate: FAIL {case.classname} > {case.name}: {case.message}", file=out)
    print(f"gate: {'PASSED' if verdict.passed else 'FAILED'} ({verdict.count('passed')} "
          f"passed, {len(verdict.failures)} failed, "
          f"{plural(verdict.count('xfail'), 'expected failure')})"
          + (f"; JUnit {args.junit}" if args.junit else "")
          + (f"; summary {args.summary}" if args.summary else ""), file=out)
    if wants_json(args):
        emit({"playbook": str(args.playbook), "title": verdict.title, "passed": verdict.passed,
              "exit_code": verdict.exit_code,
              "cases": [dataclasses.asdict(case) for case in verdict.cases],
              "runs": [run.to_json() for run in runs],
              "rejected": {str(path): reason for path, reason in rejected.items()},
              "chains": [dataclasses.asdict(chain) for chain in evidence.chains],
              "junit": str(args.junit) if args.junit else None,
              "summary": str(args.summary) if args.summary else None}, sys.stdout)
    return verdict.exit_code


def _schedule(args: argparse.Namespace) -> int:
    from gameday.gamedays.playbook import load_playbook
    from gameday.gamedays.schedule import CronJobOptions, cronjob_yaml, crontab_line

    playbook = load_playbook(args.playbook)
    if args.emit == "crontab":
        print(crontab_line(playbook, repo=Path.cwd()))
        return 0
    options = CronJobOptions(namespace=args.namespace)
    if args.image:
        options = CronJobOptions(namespace=args.namespace, image=args.image)
    sys.stdout.write(cronjob_yaml(playbook, options))
    return 0


def _coverage(args: argparse.Namespace) -> int:
    from gameday.evidence import signing
    from gameday.evidence.index import open_index
    from gameday.gamedays import coverage
    from gameday.gamedays.playbook import load_requirements

    requirements = load_requirements(args.require) if args.require else []
    trusted = signing.load_public(args.public_key) if args.public_key else None
    matrix = coverage.build(args.directory, trusted=trusted, exclude_lab=args.exclude_lab,
                            index=open_index(args.index, trusted))
    matrix.check(requirements)
    score = None
    if args.format == "html":
        from gameday.gamedays.score import compute

        score = compute(matrix.summaries, rejected=[(r.path, r.reason) for r in matrix.rejected],
                        requirements=requirements, now=matrix.generated_at)
    _write(coverage.render(matrix, args.format, score), args.output)
    for rejected in matrix.rejected:
        print(f"coverage: rejected {rejected.path}: {rejected.reason}", file=sys.stderr)
    for finding in matrix.findings:
        print(f"coverage: {finding.line()}", file=sys.stderr)
    if requirements:
        print(f"coverage: {matrix.requirements_line()}", file=sys.stderr)
    return matrix.exit_code


def _score(args: argparse.Namespace) -> int:
    import time

    from gameday.errors import ObservabilityError
    from gameday.evidence import checked, signing
    from gameday.evidence.index import open_index
    from gameday.gamedays.playbook import load_requirements
    from gameday.gamedays.score import compute
    from gameday.report.metrics import write_score_textfile

    policy = _policy(args)
    requirements = load_requirements(args.require) if args.require else []
    trusted = signing.load_public(args.public_key) if args.public_key else None
    results = publisher(args)
    evidence = checked.check(args.directory, trusted, open_index(args.index, trusted))
    if not evidence.verified and not evidence.rejected:
        from gameday.errors import InvalidInput

        raise InvalidInput("holds no gameday journal", file=str(args.directory))
    score = compute([summary for _, summary in evidence.verified],
                    rejected=[(str(j.path), str(j.problem)) for j in evidence.rejected],
                    requirements=requirements, policy=policy, now=time.time())
    if wants_json(args):
        emit(score.to_json(), sys.stdout)
    else:
        print("\n".join(score.lines()))
    if results is not None:
        try:
            if results.metrics_file is not None:
                write_score_textfile(results.metrics_file, score)
            if results.pushgateway is not None:
                results.pushgateway.push_score(score)
        except ObservabilityError as exc:
            print(f"gameday: metrics not published: {exc}", file=sys.stderr)
    return 0


def _report(args: argparse.Namespace) -> int:
    from gameday.report import playbook
    from gameday.report.document import report

    if playbook.is_playbook_record(args.journal):
        record = playbook.read_record(args.journal)
        render = playbook.render_html if args.format == "html" else playbook.render_markdown
        text = render(record, _fleet(args, record.fleet))
        stem = args.journal.name[:-len(playbook.RECORD_SUFFIX)]
        beside = args.journal.with_name(f"{stem}.{args.format}")
    else:
        text = report(args.journal, args.format, _fleet(args))
        beside = args.journal.with_suffix(f".{args.format}")
    output = args.output or beside
    _write(text, None if str(output) == "-" else output)
    return 0


def dispatch(args: argparse.Namespace) -> int:
    """Run one of ``COMMANDS``."""
    handlers = {"play": _play, "gate": _gate, "schedule": _schedule, "coverage": _coverage,
                "score": _score, "report": _report}
    return handlers[args.command](args)
