"""How every ``gameday`` subcommand's parser is made: a one-line help, the same as its
description, and an example at the end of its ``--help``."""

import argparse
from typing import Any


def command(commands: Any, name: str, help: str, example: str) -> argparse.ArgumentParser:
    """Add subcommand ``name`` to ``commands`` (an argparse subparsers action); its
    ``--help`` ends with ``example`` (one command a line)."""
    parser: argparse.ArgumentParser = commands.add_parser(
        name, help=help, description=help[:1].upper() + help[1:] + ".",
        epilog="example:\n" + "\n".join(f"  {line}" for line in example.splitlines()),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    return parser
