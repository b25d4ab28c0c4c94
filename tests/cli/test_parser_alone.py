"""A command line's parser holds only the subcommand it names (docs/gamedays.md, "Run
overhead"), and that subcommand reads every command line as it does beside the others."""

import argparse
import contextlib
import io

import pytest

from gameday.cli.main import COMMANDS, _parser
from tests.cli.test_terminal import _parsers


def _commands(parser: argparse.ArgumentParser) -> list[str]:
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return list(action.choices)


def _helps(parser: argparse.ArgumentParser) -> dict[str, str]:
    return {path: sub.format_help() for path, sub in _parsers(parser)[1:]}


def test_every_command_is_listed_in_the_full_parser() -> None:
    for arguments in ([], ["--help"], ["--version"], ["rnu", "x.yaml"], ["completion", "bash"]):
        assert _commands(_parser(arguments)) == list(COMMANDS), arguments


@pytest.mark.parametrize("name", [name for name in COMMANDS if name != "completion"])
def test_a_command_alone_is_the_command_beside_the_others(name: str) -> None:
    alone = _parser([name, "x"])
    assert _commands(alone) == [name]
    full = {path: text for path, text in _helps(_parser()).items()
            if path == f"gameday {name}" or path.startswith(f"gameday {name} ")}
    assert _helps(alone) == full and full


def _parsed(parser: argparse.ArgumentParser, arguments: list[str]) -> tuple[str, object]:
    """What ``parser`` makes of ``arguments``: the namespace, or the usage error."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            return "parsed", vars(parser.parse_args(arguments))
        except SystemExit as exc:
            return f"exit {exc.code}", (out.getvalue(), err.getvalue())


LINES = [
    ["run", "x.yaml"], ["run", "x.yaml", "--target", "lab", "--var", "a=b", "--dry-run"],
    ["run", "x.yaml", "--target", "nowhere"], ["run"], ["run", "x.yaml", "--no-such-option"],
    ["plan", "x.yaml", "--output", "json"], ["validate", "a.yaml", "b.yaml", "--var", "k=v"],
    ["validate"], ["faults", "gpu.ecc", "--json"], ["lab", "up", "--nodes", "3"],
    ["lab", "sideways"], ["audit", "verify", "journals", "--min-sequence", "x"],
    ["audit", "keygen", "k"], ["gate", "p.yaml", "--journals", "j", "--min-score", "90"],
    ["schedule", "p.yaml"], ["coverage", "j", "--format", "csv", "-o", "m.csv"],
    ["score", "j"], ["report", "j.json", "--format", "md"], ["halt", "--output", "json"],
    ["cleanup", "--all-agents"], ["init", "new.yaml"], ["play", "p.yaml"], ["agent", "serve"],
]


@pytest.mark.parametrize("arguments", LINES, ids=" ".join)
def test_a_command_line_reads_the_same_either_way(arguments: list[str]) -> None:
    assert _parsed(_parser(arguments), arguments) == _parsed(_parser(), arguments)
