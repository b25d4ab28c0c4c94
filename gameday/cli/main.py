"""The ``gameday`` command line (docs/running.md).

Exit codes: 0 passed; 1 failed; 2 invalid input (nothing injected); 128+signum when
interrupted (130 SIGINT, 143 SIGTERM), after rolling back; 141 (SIGPIPE's) when the
reader of its output went away (``gameday faults | head -1``), quietly.
"""

import argparse
import gc
import importlib
import os
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from gameday.engine.runner import RunOutcome
    from gameday.kinds import KindParams, KindSpec

from gameday import __version__, paths
from gameday.cli.output import add_output_argument, emit, wants_json
from gameday.cli.parsers import CommandParser, command, wants_json_argv
from gameday.cli.results import add_arguments as add_result_arguments
from gameday.cli.results import publisher
from gameday.errors import GamedayError, InvalidInput
from gameday.logs import configure as configure_logging
from gameday.targets import TARGET_KINDS, agent_tls

#: What a command of the orchestrator imports that the agent extra does not install:
#: without them (an agent-only install) such a command says which extra to install.
ORCHESTRATOR_MODULES = frozenset({"chaoslib", "chaostoolkit", "requests", "urllib3", "numpy",
                                  "prometheus_api_client", "croniter", "rich", "cryptography",
                                  "redis", "kubernetes", "tenacity"})

#: The commands that only read (``audit verify`` too): they create no file anywhere
#: but what they are told to write (``report -o``, ``coverage -o``).
READ_ONLY_COMMANDS = frozenset({"validate", "faults", "coverage", "score", "report", "plan"})

def _parser(arguments: Sequence[str] = ()) -> argparse.ArgumentParser:
    """The ``gameday`` parser for a command line: with only the subcommand it names, or
    with every subcommand when it names none of them (no command, ``--help``, a typo,
    ``completion``, which writes them all out). Each subcommand's parser is the same
    either way; building the other sixteen cost a plain run 4 ms (docs/gamedays.md)."""
    parser = CommandParser(
        prog="gameday", description="Chaos engineering for GPU / AI infrastructure.",
        epilog="start here:\n  gameday init my-first.yaml && gameday validate my-first.yaml "
               "&& gameday run my-first.yaml --dry-run\n\nexit codes: 0 passed, 1 failed, "
               "2 invalid input (nothing injected), 130/143 interrupted (docs/running.md)",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"gameday {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    named = arguments[0] if arguments else None
    alone = named in COMMANDS and named != "completion"
    for name, add in COMMANDS.items():
        if not alone or name == named:
            add(commands)
    return parser


def _experiment_arguments(sub: argparse.ArgumentParser) -> None:
    """What ``run`` and ``plan`` both take."""
    sub.add_argument("experiment", type=Path, help="the experiment file (YAML or JSON)")
    sub.add_argument("--target", choices=TARGET_KINDS,
                     help="where faults land (default: the experiment's target)")
    sub.add_argument("--var", action="append", default=[], metavar="KEY=VALUE",
                     help="set a configuration value (repeatable)")
    sub.add_argument("--lab-dir", type=Path, help="lab directory (default "
                                                  "$GAMEDAY_LAB_DIR or .gameday/lab)")
    sub.add_argument("--target-config", type=Path, metavar="FILE",
                     help="allowlist and agents of the target (default "
                          "$GAMEDAY_TARGET_CONFIG)")
    add_output_argument(sub)
    agent_tls.add_arguments(sub)


def _add_run(commands: Any) -> None:
    run = command(commands, "run", "run one experiment",
                  "gameday run experiments/gpu-ecc-dbe-reshard.yaml --target lab")
    _experiment_arguments(run)
    run.add_argument("--journal-path", type=Path, metavar="PATH",
                     help="where the journal goes (default journals/<stamp>-<name>.json)")
    run.add_argument("--dry-run", action="store_true",
                     help="show the plan (targets resolved read-only, blast radius, locks, "
                          "SLOs); start nothing, inject nothing, take no lock")
    run.add_argument("--sign-key", type=Path, metavar="KEY",
                     help="sign the journal with this Ed25519 key (gameday audit keygen)")
    run.add_argument("--html", nargs="?", type=Path, const=True, metavar="PATH",
                     help="also write the run's HTML report (default: beside the journal, "
                          ".html), as gameday report would")
    add_result_arguments(run)


def _add_plan(commands: Any) -> None:
    _experiment_arguments(command(
        commands, "plan", "what a run would do, read-only (the same as run --dry-run)",
        "gameday plan experiments/gpu-ecc-dbe-reshard.yaml --output json"))


def _add_cleanup(commands: Any) -> None:
    cleanup = command(commands, "cleanup", "revert every fault the ledger (and agents) still "
                                           "hold; safe to run twice",
                      "gameday cleanup --all-agents")
    cleanup.add_argument("--all-agents", action="store_true",
                         help="also revert every active fault of every known agent")
    cleanup.add_argument("--force", action="store_true",
                         help="also revert faults of runs that are still alive")
    cleanup.add_argument("--forget-unreachable", action="store_true",
                         help="record ledger faults whose agent cannot be reached as "
                              "forgotten, so later cleanups skip them")
    cleanup.add_argument("--target-config", type=Path, metavar="FILE",
                         help="allowlist and agents of the target (default "
                              "$GAMEDAY_TARGET_CONFIG)")
    agent_tls.add_arguments(cleanup)


def _add_audit(commands: Any) -> None:
    audit = command(commands, "audit", "evidence: verify journals, make signing keys",
                    "gameday audit verify journals/")
    audit_commands = audit.add_subparsers(dest="audit_command", required=True,
                                          metavar="verify|keygen")
    verify = command(audit_commands, "verify", "check the hash chain and signatures",
                     "gameday audit verify journals/ --public-key gameday.key.pub")
    verify.add_argument("directory", type=Path, help="a directory of journals (one chain)")
    verify.add_argument("--public-key", type=Path, metavar="KEY.pub",
                        help="require every journal, and the chain head, to be signed by "
                             "this key")
    verify.add_argument("--expect-head", metavar="SHA256",
                        help="an anchor kept outside the directory: the chain must still "
                             "hold this journal hash (a head published earlier)")
    verify.add_argument("--min-sequence", type=int, metavar="N",
                        help="an anchor kept outside the directory: the chain head's "
                             "sequence number must be at least N")
    add_output_argument(verify)
    keygen = command(audit_commands, "keygen", "write an Ed25519 key pair",
                     "gameday audit keygen gameday.key")
    keygen.add_argument("key", type=Path, help="private key file (public key: KEY.pub)")


def _add_validate(commands: Any) -> None:
    validate = command(commands, "validate", "validate experiments, playbooks, target "
                       "configurations and requirement files; inject nothing",
                       "gameday validate experiments/*.yaml playbooks/release-gate.yaml")
    validate.add_argument("experiments", type=Path, nargs="+", metavar="FILE",
                          help="files to validate (every error of every file is reported)")
    validate.add_argument("--target", choices=TARGET_KINDS,
                          help="the target whose variables (${service_url}, ...) count as "
                               "defined (default: each experiment's)")
    validate.add_argument("--var", action="append", default=[], metavar="KEY=VALUE",
                          help="a configuration value the run will be given (repeatable)")
    add_output_argument(validate)


def _add_faults(commands: Any) -> None:
    faults = command(commands, "faults", "the fault catalogue, or one kind of it",
                     "gameday faults gpu.ecc --output json")
    kind = faults.add_argument("kind", nargs="?", metavar="KIND",
                               help="show only this kind (gpu.ecc, net.link_flap, ...)")
    kind.complete_with = "fault-kinds"  # type: ignore[attr-defined]  # completion.py
    add_output_argument(faults)
    faults.add_argument("--json", action="store_true", help="the same as --output json")
    faults.add_argument("--markdown", action="store_true",
                        help="the reference as in docs/faults.md")


def _add_lab(commands: Any) -> None:
    lab = command(commands, "lab", "the embedded lab", "gameday lab up && gameday lab status")
    lab_commands = lab.add_subparsers(dest="lab_command", required=True, metavar="up|status|down")
    up = command(lab_commands, "up", "start the lab", "gameday lab up --nodes 2 --shards 6")
    up.add_argument("--nodes", type=int, default=2, help="nodes, 1 to 16 (default 2)")
    up.add_argument("--gpus-per-node", type=int, default=4,
                    help="virtual GPUs per node, 1 to 16 (default 4)")
    up.add_argument("--shards", type=int, default=6,
                    help="model shards, one GPU each (default 6)")
    up.add_argument("--timeout", type=float, default=30.0, metavar="S",
                    help="seconds to wait for every process to be ready (default 30; a "
                         "loaded machine may need more)")
    status = command(lab_commands, "status", "processes, endpoints, active faults",
                     "gameday lab status --output json")
    add_output_argument(status)
    status.add_argument("--json", action="store_true", help="the same as --output json")
    down = command(lab_commands, "down", "stop the lab; leaves nothing behind",
                   "gameday lab down")
    for sub in (up, status, down):
        sub.add_argument("--dir", type=Path,
                         help="lab directory (default $GAMEDAY_LAB_DIR or .gameday/lab)")


def _add_agent(commands: Any) -> None:
    agent = command(commands, "agent", "the node agent",
                    "gameday agent serve --backend virtual --listen 127.0.0.1:9410")
    agent_commands = agent.add_subparsers(dest="agent_command", required=True,
                                          metavar="init|serve|policy")
    agent_commands.add_parser("init", help="set up a host agent in a directory: token, "
                              "policy, TLS, systemd unit (gameday agent init --help)",
                              add_help=False)
    agent_commands.add_parser("serve", help="serve the agent API (gameday agent serve --help)",
                              add_help=False)
    agent_commands.add_parser("policy", help="check an agent policy (--check FILE)",
                              add_help=False)


def _elsewhere(module: str, function: str = "add_command") -> Callable[[Any], None]:
    """What adds a subcommand written in ``module``, imported only when it is wanted."""
    def add(commands: Any) -> None:
        getattr(importlib.import_module(module), function)(commands)
    return add


#: Every subcommand and what adds it to the parser, in the order ``--help`` lists them.
COMMANDS: dict[str, Callable[[Any], None]] = {
    "run": _add_run, "plan": _add_plan, "init": _elsewhere("gameday.cli.init"),
    "halt": _elsewhere("gameday.cli.halt"), "cleanup": _add_cleanup, "audit": _add_audit,
    "validate": _add_validate, "faults": _add_faults, "lab": _add_lab,
    **{name: _elsewhere("gameday.cli.reports", f"add_{name}")
       for name in ("play", "gate", "schedule", "coverage", "score", "report")},
    "agent": _add_agent, "completion": _elsewhere("gameday.cli.completion"),
}


def _cmd_run(args: argparse.Namespace) -> int:
    """``run`` and ``plan`` (a plan is a dry run)."""
    from gameday.engine.runner import RunOptions, parse_vars, run

    dry_run = args.command == "plan" or args.dry_run
    as_json = wants_json(args)
    options = RunOptions(path=args.experiment, target=args.target,
                         journal_path=getattr(args, "journal_path", None),
                         variables=parse_vars(args.var), dry_run=dry_run,
                         target_config=args.target_config,
                         sign_key=getattr(args, "sign_key", None), render_plan=not as_json)
    if args.lab_dir:
        options.lab_dir = args.lab_dir.absolute()
    if as_json and not dry_run:
        options.out = sys.stderr  # progress for people; the document alone on stdout
    results = publisher(args) if not dry_run else None
    html = getattr(args, "html", None)
    if not dry_run:
        options.show = lambda outcome: _show_run(outcome, html, options.out, as_json)
    outcome = run(options)
    if outcome.plan is not None:
        if as_json:
            emit({"plan": outcome.plan.to_json(), "exit_code": outcome.exit_code}, sys.stdout)
        return outcome.exit_code
    if as_json:
        emit({"exit_code": outcome.exit_code,
              "journal": str(outcome.journal_path) if outcome.journal_path else None,
              "report": str(_html_path(outcome, html)) if html and outcome.journal_path
              else None,
              "verdict": outcome.verdict.to_json() if outcome.verdict else None}, sys.stdout)
    if results is not None and outcome.journal_path is not None:
        results.publish_journal(outcome.journal_path)
    return outcome.exit_code


def _html_path(outcome: "RunOutcome", html: Path | bool | None) -> Path | None:
    """Where ``run --html`` writes the run's report: the path given, else (``--html``
    alone: ``True``) beside the journal, ``.html``."""
    if not html or outcome.journal_path is None:
        return None
    return outcome.journal_path.with_suffix(".html") if html is True else Path(html)


def _show_run(outcome: "RunOutcome", html: Path | bool | None, out: TextIO, as_json: bool) -> None:
    """A run's end, shown while the lab it started still runs: the HTML report written
    if ``--html`` asked for it, then (for people) the verdict table, the journal and the
    report."""
    report_path = _html_path(outcome, html)
    if report_path is not None and outcome.journal_path is not None:
        from gameday.atomic import replace_file, shareable_mode
        from gameday.report.document import report

        replace_file(report_path, report(outcome.journal_path, "html").encode(),
                     mode=shareable_mode(), durable=True)
    if not as_json:
        from gameday.report.terminal import print_run

        print_run(outcome.journal, outcome.journal_path, out, report_path)


def _cmd_validate(args: argparse.Namespace) -> int:
    from gameday.engine.runner import parse_vars
    from gameday.gamedays.validate import validate_files

    report = validate_files(args.experiments, target=args.target,
                            variables=parse_vars(args.var))
    if wants_json(args):
        emit(report.to_json(), sys.stdout)
    else:
        for error in report.errors():
            print(f"gameday: {error}", file=sys.stderr)
        for line in report.lines():
            print(line)
    return report.exit_code


def _cmd_faults(args: argparse.Namespace) -> int:
    from gameday.kinds import CATALOGUE

    if args.markdown:
        from faults.reference import catalogue_markdown, kind_markdown

        print(kind_markdown(_fault_kind(args.kind)) if args.kind else catalogue_markdown())
        return 0
    kinds = [_fault_kind(args.kind)] if args.kind else list(CATALOGUE.values())
    if wants_json(args) or args.json:
        if args.kind:
            emit(kinds[0].to_json(), sys.stdout)
        else:
            emit({"kinds": [kind.to_json() for kind in kinds]}, sys.stdout)
        return 0
    for kind in kinds:
        layers = ", ".join(f"{t}: {layer}" for t, layer in kind.injected_at.items())
        print(f"{kind.name:<14} {kind.coverage_layer:<8} {kind.module}.{kind.func}  "
              f"[injected_at {layers}]")
        print(f"{'':<14} {kind.summary}")
        if kind.selects is not None:
            keys = ", ".join(kind.selects.key_names) or "a node name"
            print(f"{'':<16}{kind.selects.argument} (a selector: {keys}): which target")
        for param in kind.params:
            default = list(param.default) if isinstance(param.default, tuple) else \
                param.default
            print(f"{'':<16}{param.name} ({param.type_name}, "
                  f"{'required' if param.required else f'default {default!r}'}): "
                  f"{param.doc}")
    return 0


def _fault_kind(name: str) -> "KindSpec[KindParams]":
    """The catalogue entry ``name``, or InvalidInput naming the closest kinds."""
    import difflib

    from gameday.kinds import CATALOGUE

    if name in CATALOGUE:
        return CATALOGUE[name]
    close = difflib.get_close_matches(name, list(CATALOGUE), n=3, cutoff=0.5)
    hint = f"; did you mean {' or '.join(close)}?" if close else ""
    raise InvalidInput(f"no fault kind {name!r} (`gameday faults` lists them){hint}")


def _cmd_cleanup(args: argparse.Namespace) -> int:
    from gameday.safety import targetconfig
    from gameday.safety.cleanup import cleanup, print_report

    config = targetconfig.from_environment(args.target_config)
    report = cleanup(paths.ledger_path(), lab_dir=paths.lab_dir(), config=config,
                     all_agents=args.all_agents, force=args.force,
                     forget_unreachable=args.forget_unreachable)
    print_report(report, sys.stdout)
    return report.exit_code


def _cmd_audit(args: argparse.Namespace) -> int:
    from gameday.evidence import audit, signing

    if args.audit_command == "keygen":
        public = signing.generate(args.key)
        print(f"private key {args.key} (keep it secret), public key {public}")
        return 0
    if not args.directory.is_dir():
        raise InvalidInput("is not a directory of journals", file=str(args.directory))
    trusted = signing.load_public(args.public_key) if args.public_key else None
    anchor = audit.anchor_from(args.expect_head, args.min_sequence)
    result = audit.verify(args.directory, trusted, anchor=anchor)
    if wants_json(args):
        emit({"directory": str(args.directory), "ok": result.ok, "journals": result.journals,
              "signed": result.signed, "problems": result.problems,
              "verified": result.verified, "rejected": result.rejected,
              "head": result.head_json(), "exit_code": 0 if result.ok else 1}, sys.stdout)
    else:
        print(result.line())
        head = result.head_line()
        if head is not None:  # what to record as an anchor; stdout keeps the one verdict
            print(head, file=sys.stderr)
    return 0 if result.ok else 1


def _cmd_lab(args: argparse.Namespace) -> int:
    from gameday.targets import lab

    lab_dir = (args.dir or paths.lab_dir()).absolute()
    if args.lab_command == "up":
        if not args.timeout > 0:
            raise InvalidInput(f"--timeout must be > 0 s, got {args.timeout:g}")
        document = lab.up(lab_dir, nodes=args.nodes, gpus_per_node=args.gpus_per_node,
                          shards=args.shards, timeout_s=args.timeout)
        print(f"lab ready in {lab_dir}: service {document['service_url']}, "
              f"prometheus {document['prometheus_url']}, placement {document['placement_url']}")
        return 0
    if args.lab_command == "status":
        as_json = wants_json(args) or args.json
        try:
            report = lab.status(lab_dir)
        except GamedayError as exc:
            if not as_json:
                raise
            emit({"lab_dir": str(lab_dir), "status": "not running" if not lab.running(lab_dir)
                  else "error", "error": str(exc), "exit_code": exc.exit_code}, sys.stdout)
            return exc.exit_code
        if as_json:
            emit(report, sys.stdout)
        else:
            print(lab.format_status(report))
        return 0
    was_running = lab.running(lab_dir)
    lab.down(lab_dir)  # also sweeps what a lab that died left behind
    print(f"lab in {lab_dir} stopped" if was_running else
          f"no lab was running in {lab_dir}; nothing left behind")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments[:2] == ["agent", "serve"]:
        from gameday.agent.serve import main as serve_main

        return serve_main(arguments[2:])
    if arguments[:2] == ["agent", "init"]:
        from gameday.cli.agentinit import main as init_main

        return init_main(arguments[2:])
    if arguments[:2] == ["agent", "policy"]:
        from gameday.agent.serve import check_policy

        return check_policy(arguments[2:])
    parser = _parser(arguments)
    CommandParser.json_errors = wants_json_argv(arguments)
    args = parser.parse_args(arguments)
    if args.command is None:
        parser.print_help()
        return 0
    # read-only commands write nothing (not even the log): they log to stderr only
    writes = args.command not in READ_ONLY_COMMANDS and not (
        args.command == "audit" and getattr(args, "audit_command", "") == "verify") and not (
        getattr(args, "dry_run", False))
    configure_logging(paths.home() / "logs" / "gameday.log" if writes else None)
    agent_tls.apply_arguments(args)
    if args.command == "completion":
        from gameday.cli.completion import script

        sys.stdout.write(script(parser, args.shell))
        return 0
    try:
        status = _command(args)
        sys.stdout.flush()  # a closed pipe shows here, not in the exit's own flush
    except BrokenPipeError:
        # what is still buffered goes nowhere, so the exit does not fail on it again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE
    return status


def _command(args: argparse.Namespace) -> int:
    """Run the parsed command; its exit code."""
    try:
        if args.command in ("run", "plan"):
            return _cmd_run(args)
        if args.command == "init":
            from gameday.cli.init import run_init

            return run_init(args)
        if args.command == "validate":
            return _cmd_validate(args)
        if args.command == "faults":
            return _cmd_faults(args)
        if args.command == "lab":
            return _cmd_lab(args)
        if args.command in ("play", "gate", "schedule", "coverage", "score", "report"):
            from gameday.cli.reports import dispatch

            return dispatch(args)
        if args.command == "cleanup":
            return _cmd_cleanup(args)
        if args.command == "halt":
            from gameday.cli.halt import run_halt

            return run_halt(args)
        if args.command == "audit":
            return _cmd_audit(args)
    except GamedayError as exc:
        if wants_json(args):
            emit({"error": str(exc), "exit_code": exc.exit_code}, sys.stdout)
        else:
            print(f"gameday: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except ModuleNotFoundError as exc:
        if (exc.name or "").partition(".")[0] not in ORCHESTRATOR_MODULES:
            raise
        print(f"gameday: {args.command} needs the orchestrator's packages (no module named "
              f"{exc.name!r}): pip install 'gameday[orchestrator]'", file=sys.stderr)
        return 2
    return 2


def entry() -> int:
    """The ``gameday`` console script: :func:`main`, then freeze what is left for the
    interpreter to tear down (docs/gamedays.md, run overhead).

    Once a command has returned, everything it made is garbage or module state that the
    process is about to drop. The interpreter's exit still runs a full cyclic collection
    over all of it, about 30 ms after a run (a sixth of a trivial run's wall time).
    ``gc.freeze`` moves those objects out of the collector's reach: the exit frees what
    reference counting frees and leaves objects in cycles to the end of the process, so
    their finalizers do not run. Nothing of gameday's needs them: what it writes (journal,
    ledger, report) is closed where it is written. Non-daemon threads are still joined,
    and atexit handlers (logging's flush and close, temporary directories' removal) still
    run. Tests call :func:`main`, which a long-lived process may call again, so it does
    not freeze.
    """
    try:
        return main()
    finally:
        gc.freeze()


if __name__ == "__main__":
    sys.exit(entry())
