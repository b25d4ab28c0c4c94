"""docs/extending.md's worked example, run end to end so the docs cannot rot.

The example's code is imported from its file under ``docs/examples``; its experiment runs
through the engine (``gameday.testing.run_experiment``, as ``gameday run`` runs it) and
through the real ``gameday run`` command, against a real agent serving over loopback
HTTP whose backend is the example's, and the example's real HTTP service. No stand-ins.
"""

import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gameday import testing
from tests.conftest import BIN, REPO, cli_env

EXAMPLES = REPO / "docs" / "examples"
EXPERIMENT = EXAMPLES / "maintenance.yaml"

sys.path.insert(0, str(EXAMPLES))  # the experiment names the module as a user's would be
import maintenance_example  # noqa: E402


@pytest.fixture
def flag(tmp_path: Path) -> Path:
    return tmp_path / "maintenance"


@pytest.fixture
def node(flag: Path) -> Iterator[testing.RunningAgent]:
    with testing.agent(maintenance_example.MaintenanceBackend(flag)) as running:
        yield running


def test_the_example_experiment_passes_and_leaves_nothing(tmp_path: Path, flag: Path,
                                                          node: testing.RunningAgent) -> None:
    with maintenance_example.HealthService(flag) as service:
        run = testing.run_experiment(EXPERIMENT, home=tmp_path / "home", on=node,
                                     variables={"service_url": service.url})
    assert run.exit_code == 0, run.output
    [fault] = run.faults
    assert fault["kind"] == "example.maintenance" and fault["node"] == "node-0"
    assert fault["params"] == {"reason": "drain for the example"}
    assert fault["details"] == {"file": str(flag)} and fault["reverted_at"] is not None
    statuses = [(r["verifier"], r["passed"], r["measurement"]["status"]) for r in run.verifiers]
    assert statuses == [("example.health_is", True, 200), ("example.health_is", True, 503),
                        ("example.health_is", True, 200)]
    assert not flag.exists() and node.active_faults() == []


def test_a_service_that_ignores_maintenance_fails_the_run_with_one_line(
        tmp_path: Path, flag: Path, node: testing.RunningAgent) -> None:
    with maintenance_example.HealthService(flag, honours_maintenance=False) as service:
        run = testing.run_experiment(EXPERIMENT, home=tmp_path / "home", on=node,
                                     variables={"service_url": service.url})
    assert run.exit_code == 1
    failed = [r for r in run.verifiers if r["passed"] is False]
    assert [r["reason"] for r in failed] == [f"{service.url}/healthz answered 200, expected 503"]
    [fault] = run.faults
    assert fault["reverted_at"] is not None  # the rollback reverted it all the same
    assert not flag.exists() and node.active_faults() == []


def test_the_example_through_the_gameday_command(tmp_path: Path, flag: Path) -> None:
    """The documented command line: ``gameday agent serve --backend maintenance_example:backend``
    as its own process, then ``gameday run`` with the example's directory on PYTHONPATH."""
    env = cli_env(tmp_path)
    env["PYTHONPATH"] = os.pathsep.join([str(EXAMPLES), env["PYTHONPATH"]])
    env["MAINTENANCE_FILE"] = str(flag)
    env["GAMEDAY_AGENT_TOKEN"] = secrets.token_hex(32)
    agent = subprocess.Popen([str(BIN / "gameday"), "agent", "serve", "--backend",
                              "maintenance_example:backend", "--listen", "127.0.0.1:0",
                              "--state-dir", str(tmp_path / "agent"), "--node", "node-0"],
                             cwd=REPO, env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert agent.stdout is not None
        line = agent.stdout.readline()
        assert line.startswith("agent listening on "), line
        url = line.removeprefix("agent listening on ").strip()
        with maintenance_example.HealthService(flag) as service:
            done = subprocess.run(
                [str(BIN / "gameday"), "run", str(EXPERIMENT), "--var", f"agent_url={url}",
                 "--var", f"agent_token={env['GAMEDAY_AGENT_TOKEN']}",
                 "--var", f"service_url={service.url}",
                 "--journal-path", str(tmp_path / "journal.json")],
                cwd=REPO, env=env, text=True, capture_output=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
        assert not flag.exists()
    finally:
        agent.terminate()
        agent.wait(timeout=20)
        if agent.stdout is not None:
            agent.stdout.close()
