"""The agent runs from an install of only the agent extra: ``gameday agent serve`` and
``agent policy --check`` run, a real host-backend agent serves and stops on SIGTERM, and
every module of the node side imports, in an interpreter where every module the agent
extra would not install is missing (:mod:`tests.packaging.agent_only`; the set is derived
from pyproject.toml and the installed distributions' metadata, so a new orchestrator
dependency is blocked the day it is added). An orchestrator command there says which
extra to install, in one line, exit 2."""

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from gameday.wire.agent_client import AgentClient
from tests.conftest import REPO, cli_env
from tests.packaging.extras import distributions, modules_not_installed_by

TOKEN = "5f0c1d2e3a4b59687766554433221100ffeeddccbbaa99887766554433221100"
NODE_SIDE = ("gameday/agent", "gameday/node", "gameday/contract", "gameday/wire", "gameday/kube")
#: The node side's modules that need the kubernetes extra too (--reconcile-kubernetes):
#: the reconciler and the node edits it makes (retried with tenacity).
WITH_KUBERNETES = ("gameday.agent.reconcile", "gameday.kube.nodes")


def _blocked(*extras: str) -> list[str]:
    blocked = sorted(modules_not_installed_by("agent", *extras))
    # what the agent must not bring along, blocked because the agent extra lacks it
    assert {"chaoslib", "numpy", "pytest", "rich", "redis", "cryptography",
            "croniter"} <= set(blocked)
    return blocked


def _agent_only(tmp_path: Path, *args: str, extras: tuple[str, ...] = ()) \
        -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tests.packaging.agent_only",
                           json.dumps(_blocked(*extras)), *args], cwd=REPO,
                          env=cli_env(tmp_path), capture_output=True, text=True, timeout=60)


def test_the_agent_extra_holds_the_node_side_and_nothing_of_the_orchestrator() -> None:
    installed = distributions("agent")
    assert {"structlog", "pyyaml", "google-re2", "prometheus-client"} <= installed
    assert not installed & {"chaostoolkit", "chaostoolkit-lib", "numpy", "pytest", "rich",
                            "kubernetes", "redis", "cryptography", "requests"}


def test_every_node_side_module_imports_without_the_orchestrators_packages(
        tmp_path: Path) -> None:
    modules = sorted(
        ".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")
        for package in NODE_SIDE for path in (REPO / package).rglob("*.py")
        if path.name != "__main__.py")
    assert len(modules) > 30 and set(WITH_KUBERNETES) <= set(modules)
    done = _agent_only(tmp_path, "import", *(m for m in modules if m not in WITH_KUBERNETES))
    assert done.returncode == 0, done.stderr[-3000:]
    done = _agent_only(tmp_path, "import", *WITH_KUBERNETES, extras=("kubernetes",))
    assert done.returncode == 0, done.stderr[-3000:]


def test_reconciling_without_the_kubernetes_extra_names_it(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")
    token.chmod(0o600)
    done = _agent_only(tmp_path, "cli", "agent", "serve", "--backend", "virtual", "--listen",
                       "127.0.0.1:0", "--token-file", str(token), "--state-dir",
                       str(tmp_path / "state"), "--reconcile-kubernetes")
    assert done.returncode == 2, done.stderr[-3000:]
    assert "pip install 'gameday[agent,kubernetes]'" in done.stderr
    assert "Traceback" not in done.stderr


def test_agent_serve_and_policy_check_run_without_the_orchestrators_packages(
        tmp_path: Path) -> None:
    listed = _agent_only(tmp_path, "cli", "--help")
    assert listed.returncode == 0 and "agent" in listed.stdout, listed.stderr[-3000:]
    helped = _agent_only(tmp_path, "cli", "agent", "serve", "--help")
    assert helped.returncode == 0, helped.stderr[-3000:]
    assert "--backend" in helped.stdout
    policy = tmp_path / "policy.yaml"
    policy.write_text("kinds: [process.kill]\nprocesses:\n  cmdline: ['^sleep 1000$']\n")
    checked = _agent_only(tmp_path, "cli", "agent", "policy", "--check", str(policy))
    assert checked.returncode == 0, checked.stderr[-3000:]


def test_a_host_agent_serves_and_stops_without_the_orchestrators_packages(
        tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")
    token.chmod(0o600)
    policy = tmp_path / "policy.yaml"
    policy.write_text("kinds: [process.kill]\nprocesses:\n  cmdline: ['^sleep 1000$']\n")
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.packaging.agent_only", json.dumps(_blocked()), "cli",
         "agent", "serve", "--backend", "host", "--listen", "127.0.0.1:0", "--token-file",
         str(token), "--state-dir", str(tmp_path / "state"), "--node", "agent-only",
         "--policy", str(policy)], cwd=REPO, env=cli_env(tmp_path), text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stderr is not None
        line = proc.stdout.readline()
        if "agent listening on" not in line:
            proc.kill()
            pytest.fail(f"no listening line: {line!r} {proc.stderr.read()[-3000:]}")
        client = AgentClient(line.split()[-1], TOKEN)
        assert client.health()
        assert "process.kill" in client.inventory()["kinds"]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0, proc.stderr.read()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def test_an_orchestrator_command_without_its_packages_names_the_extra(tmp_path: Path) -> None:
    experiment = REPO / "experiments" / "gpu-ecc-dbe-reshard.yaml"
    done = _agent_only(tmp_path, "cli", "validate", str(experiment))
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [done.stderr.strip()]
    assert "pip install 'gameday[orchestrator]'" in done.stderr
    assert "Traceback" not in done.stderr
