"""Shared test helpers: run the real CLIs as subprocesses with the repo on the path, or
in this process (:func:`gameday_main`) where the process boundary is not what is tested."""

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml

if TYPE_CHECKING:
    from gameday.wire.agent_client import AgentClient

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def cli_env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = f"{REPO}{os.pathsep}{env.get('PYTHONPATH', '')}"
    env["GAMEDAY_HOME"] = str(tmp_path / "home")
    env["GAMEDAY_JOURNALS"] = str(tmp_path / "journals")
    return env


def write_experiment(path: Path, document: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def python_activity(kind: str, name: str, func: str, **arguments: Any) -> dict[str, Any]:
    return {"type": kind, "name": name,
            "provider": {"type": "python", "module": "tests.fixtures.acts", "func": func,
                         "arguments": arguments}}


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return cli_env(tmp_path)


def gameday(args: list[str], env: dict[str, str], timeout: float = 120,
            **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "gameday"), *args], env=env, cwd=REPO, text=True,
                          capture_output=True, timeout=timeout, **kwargs)


def gameday_main(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``gameday ARGS`` as :func:`gameday` answers it, run in this process through
    ``gameday.cli.main.main`` (half a second of interpreter start-up and imports saved per
    call): with ``env`` as the environment and the repository as the working directory,
    its stdout and stderr captured, and afterwards the environment, the directory, the
    logging it configured and the signal handlers a run installs put back. For commands
    whose process (signals, exit on a closed pipe, leftovers, the program's name) is not
    what a test checks; those use :func:`gameday`."""
    import contextlib
    import io
    import logging

    import structlog

    from gameday.cli.main import main
    from gameday.safety import signals

    out, err = io.StringIO(), io.StringIO()
    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    root = logging.getLogger()
    saved_handlers, saved_level = root.handlers[:], root.level
    saved_structlog = structlog.get_config()
    saved_signals = {signum: signal.getsignal(signum) for signum in signals.HANDLED}
    os.environ.clear()
    os.environ.update(env)
    os.chdir(REPO)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(args)
            except SystemExit as exc:  # argparse's usage errors
                code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
    finally:
        os.environ.clear()
        os.environ.update(saved_env)
        os.chdir(saved_cwd)
        for handler in root.handlers:
            if handler not in saved_handlers:
                handler.close()
        root.handlers[:] = saved_handlers
        root.setLevel(saved_level)
        structlog.configure(**saved_structlog)
        for signum, handler in saved_signals.items():
            signal.signal(signum, handler)
        signals.reset()
    return subprocess.CompletedProcess(["gameday", *args], code, out.getvalue(),
                                       err.getvalue())


def chaos(args: list[str], env: dict[str, str], timeout: float = 120,
          **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "chaos"), "--no-version-check", *args], env=env, cwd=REPO,
                          text=True, capture_output=True, timeout=timeout, **kwargs)


@pytest.fixture
def gameday_signals() -> Iterator[None]:
    """gameday's SIGINT/SIGTERM/SIGHUP handlers (as ``gameday run`` installs them) for
    one test, pytest's put back after it."""
    from gameday.safety import signals
    previous = {signum: signal.getsignal(signum) for signum in signals.HANDLED}
    signals.reset()
    signals.install()
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        signals.reset()


def read_json(path: Path) -> Any:
    return json.loads(path.read_text())


def lab_processes(directory: Path) -> list[int]:
    """Processes whose command line names the lab directory (leftovers after ``down``)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, ValueError):
            continue
        if str(directory) in cmdline:
            found.append(int(proc.name))
    return found


def lab_agents(lab_dir: Path) -> dict[str, "AgentClient"]:
    """A client of each of the lab's agents, by node name (the token from lab.json)."""
    from gameday.wire.agent_client import AgentClient

    document = read_json(lab_dir / "lab.json")
    token = Path(document["token_file"]).read_text().strip()
    return {node["name"]: AgentClient(node["agent_url"], token) for node in document["nodes"]}


def lab_faults(lab_dir: Path, *, include_reverted: bool = False) -> list[dict[str, Any]]:
    """The faults the lab's agents hold (with ``include_reverted``, those they recently
    reverted too)."""
    return [fault for client in lab_agents(lab_dir).values()
            for fault in client.faults(include_reverted=include_reverted)]


@pytest.fixture
def lab_env(tmp_path: Path, lab_dir: Path) -> Iterator[dict[str, str]]:
    """The CLI's environment for the session's lab (``lab_dir``); the test must leave no
    fault active on it."""
    env = cli_env(tmp_path)
    env["GAMEDAY_LAB_DIR"] = str(lab_dir)
    yield env
    assert lab_faults(lab_dir) == [], "the test left a fault active on the lab"


@pytest.fixture(scope="session")
def lab_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One real lab for every module that asks for it (real processes, Prometheus, FUSE
    store: about 6 s to start, most of it Prometheus's first scrape); each test leaves it
    as it found it (no fault active), and at the end it is stopped and must leave no
    process behind."""
    from gameday.lab import api as lab

    directory = tmp_path_factory.mktemp("lab")
    lab.up(directory)
    try:
        yield directory
    finally:
        lab.down(directory)
    assert lab_processes(directory) == [], "the lab left processes behind"


def _renewers() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name == "lease-renewer" and t.is_alive()}


@pytest.fixture(autouse=True)
def no_lease_renewer_left() -> Iterator[None]:
    """A test that opens a session closes it: a renewer left running would renew (or
    fail to renew) its leases through every later test."""
    before = _renewers()
    yield
    deadline = time.monotonic() + 2.0
    while (left := _renewers() - before) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not left, f"{len(left)} lease renewer(s) left running: close the session"
