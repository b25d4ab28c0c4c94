"""Never signal yourself: a process selector that matches the orchestrator, its
ancestors, a gameday agent or PID 1 is refused before anything is signalled.

Everything is real: the ``gameday run`` and ``gameday agent serve`` processes, the
victims (``sleep``), the agent's host process backend, signals and ``/proc``.
"""

import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml

from gameday.agent.policy import Policy
from gameday.agent.server import AgentServer
from gameday.errors import AgentError
from gameday.node.host.backend import HostBackend
from gameday.node.host.process import handlers
from gameday.node.processes import gameday_role, protected_processes
from gameday.wire.agent_client import AgentClient
from tests.safety.safety_helpers import REPO, TOKEN, env_for
from tests.waiting import wait_until

GAMEDAY = str(Path(sys.executable).parent / "gameday")


@contextmanager
def process_agent(tmp: Path) -> Iterator[AgentServer]:
    """A real agent (in this process) with the host's real process faults, under a policy
    that lets it signal any process (so only the protection itself refuses)."""
    backend = HostBackend("host-0", list(handlers()))
    backend.use_policy(Policy(kinds=frozenset({"process.kill", "process.pause"}),
                              process_cmdline=(".",), max_processes=8))
    server = AgentServer(backend, token=TOKEN, node="host-0",
                         state_path=tmp / "agent.json").start()
    try:
        yield server
    finally:
        server.stop()


@contextmanager
def sleepers(tag: str, count: int) -> Iterator[list[subprocess.Popen[bytes]]]:
    """``count`` real victim processes whose command lines hold ``tag``."""
    procs = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", tag])
             for _ in range(count)]
    try:
        yield procs
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def _experiment(path: Path, selector: dict[str, object], variables: dict[str, str]) -> Path:
    path.write_text(yaml.safe_dump({
        "version": "1.0.0", "title": "kill a process", "description": "selector test",
        "configuration": variables,
        "extensions": [{"name": "gameday", "target": "host", "lease_s": 30}],
        "method": [{"type": "action", "name": "kill-it", "provider": {
            "type": "python", "module": "faults.process", "func": "kill",
            "arguments": {"process": selector}}}],
    }, sort_keys=False))
    return path


def _run(tmp: Path, path: Path, server: AgentServer
         ) -> tuple[subprocess.Popen[str], str, str]:
    """Run ``gameday run PATH`` against ``server`` to its end."""
    env = dict(env_for(tmp), GAMEDAY_AGENT_URL=server.url, GAMEDAY_AGENT_TOKEN=TOKEN)
    proc = subprocess.Popen([GAMEDAY, "run", str(path)], env=env, cwd=REPO, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = proc.communicate(timeout=120)
    return proc, out, err


def test_the_roles_of_gameday_command_lines() -> None:
    assert gameday_role(["/venv/bin/gameday", "run", "x.yaml"]) == \
        "a gameday orchestrator (gameday run)"
    assert gameday_role(["python", "-m", "gameday.cli", "--verbose", "gate", "p.yaml"]) == \
        "a gameday orchestrator (gameday gate)"
    assert gameday_role(["/usr/bin/python3", "/venv/bin/gameday", "agent", "serve"]) == \
        "a gameday agent"
    assert gameday_role(["python", "-m", "gameday.lab.supervisor", "--dir", "d"]) == \
        "the lab supervisor"
    assert gameday_role(["python", "-m", "gameday.node.faultfs", "--backing", "b"]) == \
        "a fault-filesystem process"
    assert gameday_role(["/venv/bin/gameday", "report", "j.json"]) is None
    assert gameday_role(["tritonserver", "--model-repository", "/models/gameday"]) is None


def test_pid_1_this_process_and_its_ancestors_are_protected() -> None:
    with sleepers(f"gdself-{uuid.uuid4().hex}", 1) as [victim]:
        found = {p.pid: p.why for p in protected_processes([1, os.getpid(), os.getppid(),
                                                             victim.pid])}
    assert found[1] == "PID 1 (init)"
    assert found[os.getpid()] == "this process"
    assert found[os.getppid()].startswith("an ancestor of this process")
    assert victim.pid not in found


def test_the_agent_refuses_a_selector_that_matches_an_agent_and_signals_nothing(
        tmp_path: Path) -> None:
    """A real ``gameday agent serve`` and a victim both match: 403 naming the agent, and
    the victim still runs; max_processes names every match."""
    tag = f"gdself-{uuid.uuid4().hex}"
    (tmp_path / "token").write_text(TOKEN)
    other = subprocess.Popen([GAMEDAY, "agent", "serve", "--listen", "127.0.0.1:0",
                              "--token-file", str(tmp_path / "token"), "--state-dir",
                              str(tmp_path / "other"), "--node", tag],
                             env=env_for(tmp_path), stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    try:
        with process_agent(tmp_path) as server, sleepers(tag, 2) as victims:
            client = AgentClient(server.url, TOKEN)
            with pytest.raises(AgentError) as refused:
                client.inject("process.kill", {"cmdline": tag}, {"max_processes": 5}, 30)
            assert refused.value.status == 403
            assert f"pid {other.pid} (" in str(refused.value)
            assert "a gameday agent" in str(refused.value)
            assert "nothing signalled" in str(refused.value)
            for pid, why in ((1, "PID 1 (init)"), (os.getpid(), "this process")):
                with pytest.raises(AgentError) as refused:
                    client.inject("process.kill", {"pid": pid}, {}, 30)
                assert refused.value.status == 403 and why in str(refused.value)
            assert all(v.poll() is None for v in victims) and other.poll() is None
            with pytest.raises(AgentError) as too_many:
                client.inject("process.kill", {"cmdline": f"time.sleep.*{tag}"}, {}, 30)
            assert too_many.value.status == 400
            for victim in victims:
                assert f"pid {victim.pid} ({sys.executable} -c import time" in \
                    str(too_many.value)
            assert all(v.poll() is None for v in victims)
            assert server.registry.faults() == []
    finally:
        other.send_signal(signal.SIGTERM)
        other.wait(30)


def test_a_run_whose_selector_matches_itself_exits_2_before_anything_runs(
        tmp_path: Path) -> None:
    """The seen case: a ``{cmdline: ...}`` selector matched the ``gameday run`` process."""
    tag = f"gdself-{uuid.uuid4().hex}"
    path = _experiment(tmp_path / f"{tag}.yaml", {"cmdline": tag}, {})
    with process_agent(tmp_path) as server:
        proc, out, err = _run(tmp_path, path, server)
        assert proc.returncode == 2, out + err
        assert f"pid {proc.pid} (" in err and "a gameday orchestrator (gameday run)" in err
        assert "nothing signalled" in err and len(err.strip().splitlines()) == 1, err
        assert server.registry.faults() == []


def test_a_selector_known_only_at_run_time_is_refused_by_the_agent_with_exit_2(
        tmp_path: Path) -> None:
    """The selector comes from a variable, so only the agent sees what it matches: the
    agent refuses, nothing is signalled, the run exits 2 naming the match."""
    tag = f"gdself-{uuid.uuid4().hex}"
    path = _experiment(tmp_path / f"{tag}.yaml", {"cmdline": "${victim}"}, {"victim": tag})
    with process_agent(tmp_path) as server:
        proc, out, err = _run(tmp_path, path, server)
        assert proc.returncode == 2, out + err
        assert f"pid {proc.pid} (" in out + err
        wait_until(lambda: server.registry.faults() == [], what="no fault")
