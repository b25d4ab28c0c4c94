"""Shared test helpers: run the real CLIs as subprocesses with the repo on the path."""

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

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
