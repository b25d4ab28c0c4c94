"""faults.process through a real host agent (``gameday agent serve --backend host``): two
workers with the same command line, told apart by their environment (``RANK``,
``TORCHELASTIC_RUN_ID``) and their parent; bad selectors are refused before anything is
signalled."""

import os
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from chaoslib.exceptions import ActivityFailed

import faults.process
from gameday.engine.session import Session, activate, deactivate
from gameday.experiment.extension import Extension
from gameday.targets.base import host_target
from tests.agent.agent_marker import REPO, kill, read_url, run_agent

TOKEN = secrets.token_hex(32)
WORKER = "import time; time.sleep(120)"
PARENT = ("import os, subprocess, sys, time\n"
          "kids = [subprocess.Popen([sys.executable, '-c', sys.argv[1]], env={**os.environ, "
          "'RANK': str(r), 'LOCAL_RANK': str(r), 'TORCHELASTIC_RUN_ID': sys.argv[2]}) "
          "for r in (0, 1)]\n"
          "time.sleep(120)")


@pytest.fixture
def session(tmp_path: Path) -> Iterator[Session]:
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")
    token.chmod(0o600)
    policy = tmp_path / "policy.yaml"  # the host backend refuses everything without one
    policy.write_text("kinds: [process.kill, process.pause]\nprocesses: {cmdline: ['time']}\n")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    agent = run_agent(["--backend", "host", "--listen", "127.0.0.1:0", "--token-file",
                       str(token), "--state-dir", str(tmp_path / "state"), "--node",
                       "host-0", "--policy", str(policy)], env, tmp_path / "agent.stderr")
    try:
        url = read_url(agent, timeout_s=30)
        target = host_target({"agent_url": url, "agent_token": TOKEN})
        session = activate(Session(target=target, extension=Extension()))
        try:
            yield session
        finally:
            session.close()  # reverts what it holds; its lease renewer stops
    finally:
        deactivate()
        kill(agent)


def workers(parent: subprocess.Popen[bytes], timeout_s: float = 20) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        children = Path(f"/proc/{parent.pid}/task/{parent.pid}/children")
        pids = [int(p) for p in children.read_text().split()] if children.exists() else []
        if len(pids) == 2:
            return pids
        time.sleep(0.05)
    raise AssertionError("the workers never started")


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def test_rank_1_of_a_job_by_environment_then_by_parent(session: Session) -> None:
    run_id = f"sel-{os.getpid()}"
    parent = subprocess.Popen([sys.executable, "-c", PARENT, WORKER, run_id])
    started: list[int] = []
    try:
        rank0, rank1 = started[:] = workers(parent)
        result = faults.process.kill(process={"env": {"RANK": "1",
                                                      "TORCHELASTIC_RUN_ID": run_id}})
        [fault] = result["faults"]
        assert fault["details"]["processes"][0]["pid"] == rank1
        deadline = time.monotonic() + 10
        while alive(rank1) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not alive(rank1) and alive(rank0)
        faults.process.kill(process={"parent": {"pid": parent.pid},
                                     "env": {"LOCAL_RANK": "0"}})
        deadline = time.monotonic() + 10
        while alive(rank0) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not alive(rank0) and alive(parent.pid)
        with pytest.raises(ActivityFailed, match="matches no live process"):
            faults.process.kill(process={"env": {"RANK": "1", "TORCHELASTIC_RUN_ID": "none"}})
        with pytest.raises(ActivityFailed, match=r"process\.env: must be a mapping"):
            faults.process.kill(process={"env": "RANK=1"})
        with pytest.raises(ActivityFailed, match="combine with name and cmdline only"):
            faults.process.kill(process={"env": {"RANK": "1"}, "pid": parent.pid})
    finally:
        for pid in started:
            if alive(pid):
                os.kill(pid, 9)
        parent.kill()
        parent.wait()
