"""The in-process CLI of the tests (``tests.conftest.gameday_main``) answers as the real
``gameday`` process does, and leaves this process as it found it."""

import logging
import os
import signal
from pathlib import Path

import pytest

from tests.conftest import cli_env, gameday, gameday_main

BAD = "method:\n  - {type: action, name: x, provider: {type: python, module: faults.gpu, " \
      "func: ecc_error, arguments: {kind: triple_bit}}}\n"


@pytest.mark.parametrize("command", [
    ["validate", "{bad}"],
    ["validate", "experiments/gpu-ecc-dbe-reshard.yaml"],
    ["faults", "--output", "json"],
    ["score", "{empty}", "--output", "json"],
    ["nonsense"],
])
def test_the_same_answer_as_the_process(tmp_path: Path, command: list[str]) -> None:
    (tmp_path / "bad.yaml").write_text(BAD)
    (tmp_path / "empty").mkdir()
    argv = [part.format(bad=tmp_path / "bad.yaml", empty=tmp_path / "empty")
            for part in command]
    env = cli_env(tmp_path)
    process, here = gameday(argv, env), gameday_main(argv, env)
    assert (here.returncode, here.stdout, here.stderr) == (
        process.returncode, process.stdout, process.stderr)


def test_environment_directory_logging_and_signals_are_put_back(tmp_path: Path) -> None:
    environment, directory = dict(os.environ), os.getcwd()
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    handlers_of = {signum: signal.getsignal(signum)
                   for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    env = {**cli_env(tmp_path), "GAMEDAY_TEST_ONLY": "1"}
    assert gameday_main(["validate", "experiments/gpu-ecc-dbe-reshard.yaml"], env).returncode == 0
    assert dict(os.environ) == environment and os.getcwd() == directory
    assert root.handlers == handlers and root.level == level
    assert {s: signal.getsignal(s) for s in handlers_of} == handlers_of
