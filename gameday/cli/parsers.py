"""How every ``gameday`` subcommand's parser is made: a one-line help, the same as its
description, and an example at the end of its ``--help``."""

import argparse
import json
import sys
from typing import Any, NoReturn

__all__ = ["CommandParser", "command", "wants_json_argv"]


def wants_json_argv(argv: list[str]) -> bool:
    """Whether a command line asks for ``--output json`` (before it is parsed)."""
    return any(a == "--output=json" or (a == "--output" and argv[i + 1:i + 2] == ["json"])
               for i, a in enumerate(argv))


class CommandParser(argparse.ArgumentParser):
    """An argument parser whose usage errors, under ``--output json``, are also one JSON
    document on stdout (``{"error", "exit_code": 2}``), as every other error is."""

    json_errors = False

    def error(self, message: str) -> NoReturn:
        if CommandParser.json_errors:
            sys.stdout.write(json.dumps({"error": f"{self.prog}: {message}", "exit_code": 2},
                                        indent=2, sort_keys=True) + "\n")
            sys.stdout.flush()
        super().error(message)


def command(commands: Any, name: str, help: str, example: str) -> argparse.ArgumentParser:
    """Add subcommand ``name`` to ``commands`` (an argparse subparsers action); its
    ``--help`` ends with ``example`` (one command a line)."""
    parser: argparse.ArgumentParser = commands.add_parser(
        name, help=help, description=help[:1].upper() + help[1:] + ".",
        epilog="example:\n" + "\n".join(f"  {line}" for line in example.splitlines()),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    return parser
