"""A run of plain python activities imports only what it uses.

``gameday validate`` and ``gameday run`` of an experiment with no fault, in a fresh
interpreter: none of the fault kinds' declarations, the fault path (injector, fan-out,
leases, agent client), the halt lever's cleanup, the host's process reading nor the
other subcommands' parsers is imported; they are when an experiment needs them
(docs/gamedays.md, "Run overhead").
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gameday.kinds.catalogue import FAMILIES
from tests.conftest import REPO, cli_env, write_experiment

#: Runs ``gameday ARGS`` as the console script does, then prints the modules it imported.
MAIN = """
import json, sys
from gameday.cli.main import main
code = main(sys.argv[1:])
print(json.dumps({"exit": code, "modules": sorted(sys.modules)}), file=sys.__stderr__)
"""

TRUE = {"type": "python", "module": "os.path", "func": "isdir", "arguments": {"s": "/"}}
PLAIN = {
    "title": "plain", "description": "one probe before and after, one action",
    "steady-state-hypothesis": {"title": "ok", "probes": [
        {"type": "probe", "name": "ok", "tolerance": True, "provider": TRUE}]},
    "method": [{"type": "action", "name": "noop", "provider": TRUE}],
}

UNUSED = (*(f"gameday.kinds.{family}" for family in FAMILIES),
          "gameday.engine.injector", "gameday.engine.fanout", "gameday.engine.fault_requests",
          "gameday.engine.leases", "gameday.engine.plan", "gameday.wire.agent_client",
          "gameday.safety.cleanup",
          "gameday.experiment.process_selector", "gameday.node", "re2",
          "gameday.cli.init", "gameday.cli.halt", "gameday.cli.reports", "gameday.cli.completion")


def _imported(args: list[str], tmp_path: Path) -> set[str]:
    result = subprocess.run([sys.executable, "-c", MAIN, *args], env=cli_env(tmp_path),
                            cwd=REPO, text=True, capture_output=True, timeout=120)
    document = json.loads(result.stderr.strip().splitlines()[-1])
    assert document["exit"] == 0, result.stdout + result.stderr
    return set(document["modules"])


@pytest.mark.parametrize("command", ["validate", "run"])
def test_a_run_without_faults_imports_no_fault_machinery(command: str, tmp_path: Path) -> None:
    path = write_experiment(tmp_path / "plain.yaml", PLAIN)
    args = [command, str(path)]
    if command == "run":
        args += ["--journal-path", str(tmp_path / "plain.json")]
    imported = _imported(args, tmp_path)
    assert "gameday.kinds.catalogue" in imported  # the activities were looked up
    assert "gameday.engine.session" in imported or command == "validate"
    assert sorted(imported & set(UNUSED)) == []


def test_a_fault_imports_its_family(tmp_path: Path) -> None:
    """The check above would pass vacuously if nothing loaded a family: validating a GPU
    fault loads the GPU kinds (and the process kinds, which the activities' door,
    gameday.activity, reads), not the network's, storage's, services', nodes' or
    Kubernetes'."""
    path = write_experiment(tmp_path / "gpu.yaml", {
        **PLAIN, "method": [{"type": "action", "name": "ecc", "provider": {
            "type": "python", "module": "faults.gpu", "func": "ecc_error",
            "arguments": {"gpu": {"node": "node-0", "index": 0}}}}]})
    imported = _imported(["validate", str(path)], tmp_path)
    families = sorted(m for m in imported if m.removeprefix("gameday.kinds.") in FAMILIES)
    assert families == ["gameday.kinds.gpu", "gameday.kinds.process"]
