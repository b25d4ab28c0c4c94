"""The ``gameday`` command line (DESIGN §3a).

Exit codes: 0 passed; 1 failed; 2 invalid input (nothing injected); 128+signum when
interrupted (130 SIGINT, 143 SIGTERM), after rolling back.
"""

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from gameday import __version__, paths
from gameday.engine.runner import RunOptions, parse_vars, run_safely
from gameday.errors import GamedayError
from gameday.logs import configure as configure_logging

#: The commands that only read (``audit verify`` too): they create no file anywhere
#: but what they are told to write (``report -o``, ``coverage -o``).
READ_ONLY_COMMANDS = frozenset({"validate", "faults", "coverage", "report"})


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gameday", description="Chaos engineering for GPU / AI infrastructure.")
    parser.add_argument("--version", action="version", version=f"gameday {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = commands.add_parser("run", help="run one experiment")
    run.add_argument("experiment", type=Path)
    run.add_argument("--target", choices=["lab", "host", "kubernetes", "none"])
    run.add_argument("--journal-path", type=Path)
    run.add_argument("--var", action="append", default=[], metavar="KEY=VALUE",
                     help="set a configuration value (repeatable)")
    run.add_argument("--dry-run", action="store_true",
                     help="resolve targets, check the blast radius, print the plan, inject nothing")
    run.add_argument("--lab-dir", type=Path, help="lab directory (default $GAMEDAY_LAB_DIR or "
                                                  ".gameday/lab)")
    run.add_argument("--target-config", type=Path, metavar="FILE",
                     help="allowlist and agents of the target (default $GAMEDAY_TARGET_CONFIG)")
    run.add_argument("--sign-key", type=Path, metavar="KEY",
                     help="sign the journal with this Ed25519 key (gameday audit keygen)")

    cleanup = commands.add_parser("cleanup", help="revert every fault the ledger (and agents) "
                                                  "still hold; safe to run twice")
    cleanup.add_argument("--all-agents", action="store_true",
                         help="also revert every active fault of every known agent")
    cleanup.add_argument("--force", action="store_true",
                         help="also revert faults of runs that are still alive")
    cleanup.add_argument("--forget-unreachable", action="store_true",
                         help="record ledger faults whose agent cannot be reached as "
                              "forgotten, so later cleanups skip them")
    cleanup.add_argument("--target-config", type=Path, metavar="FILE")

    audit = commands.add_parser("audit", help="evidence: verify journals, make signing keys")
    audit_commands = audit.add_subparsers(dest="audit_command", required=True,
                                          metavar="verify|keygen")
    verify = audit_commands.add_parser("verify", help="check the hash chain and signatures")
    verify.add_argument("directory", type=Path)
    verify.add_argument("--public-key", type=Path, metavar="KEY.pub",
                        help="require every journal to be signed by this key")
    keygen = audit_commands.add_parser("keygen", help="write an Ed25519 key pair")
    keygen.add_argument("key", type=Path, help="private key file (public key: KEY.pub)")

    validate = commands.add_parser("validate", help="validate experiments; inject nothing")
    validate.add_argument("experiments", type=Path, nargs="+")
    validate.add_argument("--var", action="append", default=[], metavar="KEY=VALUE",
                          help="a configuration value, as given to run (repeatable)")

    faults = commands.add_parser("faults", help="the fault catalogue")
    faults.add_argument("--json", action="store_true")
    faults.add_argument("--markdown", action="store_true",
                        help="the reference as in docs/faults.md")

    lab = commands.add_parser("lab", help="the embedded lab")
    lab_commands = lab.add_subparsers(dest="lab_command", required=True, metavar="up|status|down")
    up = lab_commands.add_parser("up", help="start the lab")
    up.add_argument("--nodes", type=int, default=2)
    up.add_argument("--gpus-per-node", type=int, default=4)
    up.add_argument("--shards", type=int, default=6)
    status = lab_commands.add_parser("status", help="processes, endpoints, active faults")
    status.add_argument("--json", action="store_true")
    lab_commands.add_parser("down", help="stop the lab; leaves nothing behind")
    for sub in (up, status, lab_commands.choices["down"]):
        sub.add_argument("--dir", type=Path, help="lab directory")

    from gameday.cli.reports import add_commands as add_report_commands

    add_report_commands(commands)

    agent = commands.add_parser("agent", help="the node agent")
    agent_commands = agent.add_subparsers(dest="agent_command", required=True, metavar="serve")
    agent_commands.add_parser("serve", help="serve the agent API", add_help=False)
    return parser


def _cmd_validate(experiments: list[Path], variables: dict[str, str]) -> int:
    from gameday.experiment.loader import load_experiment

    for path in experiments:
        load_experiment(path, variables)
        print(f"{path}: valid")
    return 0


def _cmd_faults(as_json: bool, as_markdown: bool = False) -> int:
    from faults.catalogue import CATALOGUE

    if as_markdown:
        from faults.reference import catalogue_markdown

        print(catalogue_markdown())
        return 0
    if as_json:
        print(json.dumps([kind.to_json() for kind in CATALOGUE.values()], indent=2))
        return 0
    for kind in CATALOGUE.values():
        layers = ", ".join(f"{t}: {layer}" for t, layer in kind.injected_at.items())
        print(f"{kind.name:<14} {kind.coverage_layer:<8} {kind.module}.{kind.func}  "
              f"[injected_at {layers}]")
        print(f"{'':<14} {kind.summary}")
        for param in kind.params:
            print(f"{'':<16}{param.name} ({param.to_json()['type']}, default "
                  f"{param.default!r}): {param.doc}")
    return 0


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
    trusted = signing.load_public(args.public_key) if args.public_key else None
    if not args.directory.is_dir():
        print(f"audit: FAILED: {args.directory} is not a directory")
        return 1
    result = audit.verify(args.directory, trusted)
    print(result.line())
    return 0 if result.ok else 1


def _cmd_lab(args: argparse.Namespace) -> int:
    from gameday.lab import api as lab

    lab_dir = (args.dir or paths.lab_dir()).absolute()
    if args.lab_command == "up":
        document = lab.up(lab_dir, nodes=args.nodes, gpus_per_node=args.gpus_per_node,
                          shards=args.shards)
        print(f"lab ready in {lab_dir}: service {document['service_url']}, "
              f"prometheus {document['prometheus_url']}, placement {document['placement_url']}")
        return 0
    if args.lab_command == "status":
        report = lab.status(lab_dir)
        if args.json:
            print(json.dumps(report, indent=2, sort_keys=True))
        else:
            print(lab.format_status(report))
        return 0
    lab.down(lab_dir)
    print(f"lab in {lab_dir} stopped")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments[:2] == ["agent", "serve"]:
        from gameday.agent.serve import main as serve_main

        return serve_main(arguments[2:])
    args = _parser().parse_args(arguments)
    # read-only commands write nothing (not even the log): they log to stderr only
    writes = args.command not in READ_ONLY_COMMANDS and not (
        args.command == "audit" and getattr(args, "audit_command", "") == "verify")
    configure_logging(paths.home() / "logs" / "gameday.log" if writes else None)
    try:
        if args.command == "run":
            options = RunOptions(path=args.experiment, target=args.target,
                                 journal_path=args.journal_path,
                                 variables=parse_vars(args.var), dry_run=args.dry_run,
                                 target_config=args.target_config, sign_key=args.sign_key)
            if args.lab_dir:
                options.lab_dir = args.lab_dir.absolute()
            return run_safely(options)
        if args.command == "validate":
            return _cmd_validate(args.experiments, parse_vars(args.var))
        if args.command == "faults":
            return _cmd_faults(args.json, args.markdown)
        if args.command == "lab":
            return _cmd_lab(args)
        if args.command in ("play", "gate", "schedule", "coverage", "report"):
            from gameday.cli.reports import dispatch

            return dispatch(args)
        if args.command == "cleanup":
            return _cmd_cleanup(args)
        if args.command == "audit":
            return _cmd_audit(args)
    except GamedayError as exc:
        print(f"gameday: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    return 2


if __name__ == "__main__":
    sys.exit(main())
