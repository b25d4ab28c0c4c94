"""The command samples in README.md and docs/ are the real commands and the real output.

Two checks, over every Markdown file the repository ships:

- every ``gameday ...`` command in a shell block (```sh, ```bash, ```console, and the
  ``$ gameday`` lines of any block) is parsed by gameday's own argument parsers: an
  option or subcommand a page names that the CLI does not have fails here, naming the
  page and line;
- every ``$ gameday ...`` line of a ```console block is run through bash, in a scratch
  directory holding the repository's files and the files the page itself defines (a
  ```yaml block whose first line is ``# NAME.yaml ...``), with no agent or lab around;
  its output (stdout and stderr) must match the lines under it. In an expected line
  ``...`` stands for any text, and a line that is ``...`` alone for any lines. (Console
  samples of other programs, such as ``curl`` against an agent of your own, are shown
  as they would answer and not run.)
"""

import os
import re
import shlex
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import BIN, REPO, cli_env

PAGES = sorted([REPO / "README.md", *(REPO / "docs").rglob("*.md")])
_BLOCK = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.S | re.M)
_SHELL = {"sh", "bash", "console", "shell"}
_SEPARATORS = {"&&", "||", ";", "|"}


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # of the block's first content line
    lang: str
    text: str

    def where(self, offset: int = 0) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line + offset}"


def blocks() -> Iterator[Block]:
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for match in _BLOCK.finditer(text):
            line = text.count("\n", 0, match.start(2)) + 1
            yield Block(page, line, match.group(1), match.group(2))


def _logical_lines(text: str) -> Iterator[tuple[int, str]]:
    """Lines with their continuations (a trailing backslash) joined, and their offsets."""
    pending, start = "", 0
    for offset, raw in enumerate(text.splitlines()):
        if not pending:
            start = offset
        if raw.rstrip().endswith("\\"):
            pending += raw.rstrip()[:-1] + " "
            continue
        yield start, pending + raw
        pending = ""
    if pending:
        yield start, pending


def gameday_commands() -> Iterator[tuple[str, list[str]]]:
    """Every ``gameday`` command line the pages show, as (where, argv after ``gameday``)."""
    for block in blocks():
        for offset, line in _logical_lines(block.text):
            stripped = line.strip()
            if block.lang not in _SHELL and not stripped.startswith("$ "):
                continue
            stripped = stripped.removeprefix("$ ")
            try:
                tokens = shlex.split(stripped, comments=True)
            except ValueError:
                continue  # not a shell line (prose in a block)
            segment: list[str] = []
            for token in [*tokens, ";"]:
                if token in _SEPARATORS:
                    argv = _gameday_argv(segment)
                    if argv is not None:
                        yield block.where(offset), argv
                    segment = []
                else:
                    segment.append(token)


def _gameday_argv(segment: list[str]) -> list[str] | None:
    words = [w.removeprefix("<(").removeprefix("$(").removesuffix(")") for w in segment]
    while words and (re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", words[0]) or words[0] == "sudo"):
        words = words[1:]
    if not words or Path(words[0]).name != "gameday":
        return None
    return words[1:]


def _parse(argv: list[str]) -> None:
    """Parse ``argv`` as ``gameday`` would, without running it."""
    from gameday.agent.serve import policy_parser, serve_parser
    from gameday.cli.agentinit import init_parser
    from gameday.cli.main import _parser

    if argv[:2] == ["agent", "serve"]:
        serve_parser().parse_args(argv[2:])
    elif argv[:2] == ["agent", "init"]:
        init_parser().parse_args(argv[2:])
    elif argv[:2] == ["agent", "policy"]:
        policy_parser().parse_args(argv[2:])
    else:
        _parser().parse_args(argv)


COMMANDS = list(gameday_commands())


def test_the_pages_show_commands() -> None:
    assert len(COMMANDS) > 40  # the checker finds them (a broken pattern finds none)


@pytest.mark.parametrize(("where", "argv"), COMMANDS, ids=[w for w, _ in COMMANDS])
def test_every_command_a_page_shows_parses(where: str, argv: list[str],
                                           capsys: pytest.CaptureFixture[str]) -> None:
    try:
        _parse(argv)
    except SystemExit as exited:
        if exited.code not in (0, None):
            pytest.fail(f"{where}: gameday {shlex.join(argv)}: "
                        f"{capsys.readouterr().err.strip().splitlines()[-1]}")


# -- console blocks: run and compared --------------------------------------------------

def _defined_files(page: Path) -> dict[str, str]:
    found = {}
    for block in blocks():
        first = block.text.split("\n", 1)[0]
        match = re.match(r"#\s*([\w.-]+\.ya?ml)\b", first)
        if block.page == page and block.lang == "yaml" and match:
            found[match.group(1)] = block.text
    return found


def _samples(block: Block) -> Iterator[tuple[int, str, list[str]]]:
    command: str | None = None
    start, expected = 0, []
    for offset, line in enumerate(block.text.rstrip("\n").splitlines()):
        if line.startswith("$ "):
            if command is not None:
                yield start, command, expected
            command, start, expected = line[2:], offset, []
        elif command is not None:
            expected.append(line)
    if command is not None:
        yield start, command, expected


def _line_matches(pattern: str, line: str) -> bool:
    parts = [re.escape(p) for p in pattern.rstrip().split("...")]
    return re.fullmatch(".*".join(parts), line.rstrip()) is not None


def matches(expected: list[str], actual: list[str]) -> bool:
    """Whether ``actual`` lines match ``expected`` (``...`` alone: any lines)."""
    if not expected:
        return not actual
    head, rest = expected[0], expected[1:]
    if head.strip() == "...":
        return any(matches(rest, actual[i:]) for i in range(len(actual) + 1))
    return bool(actual) and _line_matches(head, actual[0]) and matches(rest, actual[1:])


CONSOLE = [(b.where(offset), b, command, expected) for b in blocks() if b.lang == "console"
           for offset, command, expected in _samples(b)
           if _gameday_argv(command.split()) is not None]


def test_console_samples_are_found() -> None:
    assert CONSOLE, "no ```console sample of a gameday command: the pattern finds none"


def test_matching_is_strict_where_it_should_be() -> None:
    assert matches(["a ... c", "...", "z"], ["a b c", "x", "y", "z"])
    assert not matches(["a ... c"], ["a b d"])
    assert not matches(["a"], ["a", "extra"])


@pytest.mark.parametrize(("where", "block", "command", "expected"), CONSOLE,
                         ids=[c[0] for c in CONSOLE])
def test_every_console_sample_prints_what_the_page_shows(
        tmp_path: Path, where: str, block: Block, command: str, expected: list[str]) -> None:
    scratch = tmp_path / "here"
    scratch.mkdir()
    for entry in REPO.iterdir():
        if not entry.name.startswith("."):
            (scratch / entry.name).symlink_to(entry)
    for name, text in _defined_files(block.page).items():
        (scratch / name).unlink(missing_ok=True)
        (scratch / name).write_text(text)
    env = cli_env(tmp_path)
    env = {k: v for k, v in env.items() if not k.startswith("GAMEDAY_AGENT")}
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env["COLUMNS"] = "100"
    result = subprocess.run(["bash", "-c", command], cwd=scratch, env=env, text=True,
                            capture_output=True, timeout=120, stdin=subprocess.DEVNULL)
    actual = (result.stdout + result.stderr).rstrip("\n").splitlines()
    assert matches(expected, actual), (
        f"{where}: `{command}` printed\n" + "\n".join(actual)
        + "\n\nbut the page shows\n" + "\n".join(expected))
