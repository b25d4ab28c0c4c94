"""Never signal yourself: a process selector that matches the orchestrator, its
ancestors, a gameday agent or PID 1 is refused before anything is signalled.

Everything is real: the ``gameday run`` and ``gameday agent serve`` processes, the
victims (``sleep``), the agent's host process backend, signals and ``/proc``.
"""

import json
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
            assert f"pid {other.pid}: a gameday agent" in str(refused.value)
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
        assert f"pid {proc.pid}: " in err and "a gameday orchestrator (gameday run)" in err
        assert "nothing signalled" in err and len(err.strip().splitlines()) == 1, err
        assert server.registry.faults() == []


def test_a_selector_from_a_variable_is_refused_with_its_value_shown(
        tmp_path: Path) -> None:
    """The selector comes from a variable: the self-guard substitutes it as the action
    will, refuses, and names the value, not ``${victim}``; nothing is signalled."""
    tag = f"gdself-{uuid.uuid4().hex}"
    path = _experiment(tmp_path / f"{tag}.yaml", {"cmdline": "${victim}"}, {"victim": tag})
    with process_agent(tmp_path) as server:
        proc, out, err = _run(tmp_path, path, server)
        assert proc.returncode == 2, out + err
        assert f"pid {proc.pid}: " in out + err
        assert f"'cmdline': '{tag}'" in err and "${victim}" not in err
        wait_until(lambda: server.registry.faults() == [], what="no fault")


def test_the_self_guard_applies_the_whole_selector_env_included(tmp_path: Path) -> None:
    """``{name: python, env: {GDJOB: ...}}`` matches this test, the ``gameday run``
    process and other agents by name, but one victim by its environment: the self-guard
    filters by env as the agent does, so the run is not refused and the agent kills
    exactly the victim."""
    tag = f"gdself-{uuid.uuid4().hex}"
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"],
                              env={**os.environ, "GDJOB": tag})
    try:
        name = Path(f"/proc/{victim.pid}/comm").read_text().strip()
        path = _experiment(tmp_path / "env.yaml", {"name": name, "env": {"GDJOB": "${job}"}},
                           {"job": tag})
        with process_agent(tmp_path) as server:
            proc, out, err = _run(tmp_path, path, server)
        assert "protected" not in err and "refusing" not in err, out + err
        assert victim.wait(30) == -signal.SIGKILL
        assert proc.returncode == 0, out + err
    finally:
        victim.kill()
        victim.wait()


def test_a_seeded_pick_kills_the_planned_one_of_two_and_the_journal_records_it(
        tmp_path: Path) -> None:
    """Two replicas match; ``pick: {count: 1, seed: S}`` takes the one the seed picks
    from the sorted matches (the plan's agent check shows it), the run kills that one
    only, and the journal records the pick with the process it took."""
    from gameday.contract.pick import Pick

    tag = f"gdself-{uuid.uuid4().hex}"
    selector = {"cmdline": f"time.sleep.*{tag}", "pick": {"count": 1, "seed": 11}}
    path = _experiment(tmp_path / "pick.yaml", selector, {})
    with process_agent(tmp_path) as server, sleepers(tag, 2) as victims:
        pids = sorted(v.pid for v in victims)
        [chosen] = Pick(seed=11, count=1).choose(pids)
        env = dict(env_for(tmp_path), GAMEDAY_AGENT_URL=server.url, GAMEDAY_AGENT_TOKEN=TOKEN)
        planned = subprocess.run([GAMEDAY, "plan", str(path), "--output", "json"], env=env,
                                 cwd=REPO, text=True, capture_output=True, timeout=120)
        assert planned.returncode == 0, planned.stdout + planned.stderr
        [hit] = json.loads(planned.stdout)["plan"]["faults"][0]["hits"]
        assert hit["target"]["pick"] == {"count": 1, "seed": 11}
        assert [p["pid"] for p in hit["matches"]["processes"]] == [chosen]
        journal = tmp_path / "journal.json"
        done = subprocess.run([GAMEDAY, "run", str(path), "--journal-path", str(journal)],
                              env=env, cwd=REPO, text=True, capture_output=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
        killed = next(v for v in victims if v.pid == chosen)
        spared = next(v for v in victims if v.pid != chosen)
        assert killed.wait(30) == -signal.SIGKILL and spared.poll() is None
        [fault] = json.loads(journal.read_text())["gameday"]["faults"]
        assert fault["target"]["pick"] == {"count": 1, "seed": 11}
        assert fault["details"]["pick"] == {"count": 1, "seed": 11}
        assert [p["pid"] for p in fault["details"]["processes"]] == [chosen]


def test_validate_and_plan_agree_on_a_typed_nested_variable(tmp_path: Path) -> None:
    """``process: {pid: "${replica_pid}"}`` with ``--var replica_pid=N``: validate and
    plan both take N as the pid (converted by the selector's declared type)."""
    tag = f"gdself-{uuid.uuid4().hex}"
    with process_agent(tmp_path) as server, sleepers(tag, 1) as [victim]:
        path = _experiment(tmp_path / "pid.yaml", {"pid": "${replica_pid}"}, {})
        env = dict(env_for(tmp_path), GAMEDAY_AGENT_URL=server.url, GAMEDAY_AGENT_TOKEN=TOKEN)
        var = ["--var", f"replica_pid={victim.pid}"]
        checked = subprocess.run([GAMEDAY, "validate", str(path), *var], env=env, cwd=REPO,
                                 text=True, capture_output=True, timeout=120)
        planned = subprocess.run([GAMEDAY, "plan", str(path), *var], env=env, cwd=REPO,
                                 text=True, capture_output=True, timeout=120)
        assert checked.returncode == 0, checked.stdout + checked.stderr
        assert planned.returncode == 0, planned.stdout + planned.stderr
        assert f"pid={victim.pid}" in planned.stdout and victim.poll() is None
