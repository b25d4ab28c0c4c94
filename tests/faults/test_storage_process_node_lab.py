"""The storage, process and node fault experiments end to end on one embedded lab: the
weight store is a real FUSE mount, shards are real processes signalled for real, hogs
are real stress-ng in real cgroups; every experiment runs through the real ``gameday
run`` command line. After each, no fault is active and nothing of ours is left but the
lab's own store mount; after a ``kill -9`` of the supervisor, ``lab down`` leaves no
mount, process or cgroup."""

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gameday.lab import api as lab
from gameday.node.faultfs.mount import fuse_mounts
from gameday.wire.agent_client import AgentClient
from tests.conftest import gameday, read_json
from tests.node.storage_support import PREFIX, PREFIX_ENV, our_cgroups, our_processes

pytestmark = pytest.mark.lab


@pytest.fixture(scope="module")
def lab_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    directory = tmp_path_factory.mktemp("gdsto-lab")
    previous = os.environ.get(PREFIX_ENV)
    os.environ[PREFIX_ENV] = PREFIX  # the lab's node agents name their hog cgroups with it
    try:
        lab.up(directory)
        yield directory
    finally:
        lab.down(directory)
        if previous is None:
            os.environ.pop(PREFIX_ENV, None)
        else:
            os.environ[PREFIX_ENV] = previous
    assert our_processes(str(directory)) == [], "the lab left processes behind"
    assert fuse_mounts(directory) == [] and our_cgroups() == []


@pytest.fixture
def lab_env(lab_env: dict[str, str], lab_dir: Path) -> Iterator[dict[str, str]]:
    """The shared ``lab_env``; the test must also leave no mount or hog's cgroup."""
    yield lab_env
    assert fuse_mounts(lab_dir) == [lab_dir / "store"], "only the lab's store is mounted"
    assert our_cgroups() == [], "a hog's cgroup was left"


@pytest.mark.parametrize(("experiment", "kinds"), [
    ("storage-stall-weights", ["storage.stall", "process.kill"]),
    ("storage-errors-weights", ["storage.errors", "process.kill"]),
    ("process-kill-shard", ["process.kill"]),
    ("process-pause-shard", ["process.pause"]),
    ("node-cpu-hog", ["node.cpu_hog"]),
    ("node-memory-hog", ["node.memory_hog"]),
])
def test_experiment_passes_on_the_lab(experiment: str, kinds: list[str], tmp_path: Path,
                                      lab_env: dict[str, str]) -> None:
    journal_path = tmp_path / "journal.json"
    result = gameday(["run", f"experiments/{experiment}.yaml", "--journal-path",
                      str(journal_path)], lab_env, timeout=120)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    gd = read_json(journal_path)["gameday"]
    assert gd["verdict"]["passed"] is True
    assert [f["kind"] for f in gd["faults"]] == kinds
    assert all(f["reverted_at"] for f in gd["faults"])
    injected = {f["kind"]: f["injected_at"] for f in gd["faults"]}
    assert injected[kinds[0]] == ("storage" if kinds[0].startswith("storage") else "process")
    rto = {r["verifier"]: r for r in gd["verifiers"]}["rto.measure_recovery"]["measurement"]
    assert rto["met"] is True
    if kinds[-1].startswith(("process", "storage")):
        assert rto["failures"] > 0, "the fault never showed in the SLI"
    if experiment == "storage-stall-weights":
        assert rto["rto_s"] >= 2.0, "the restarted shard came up while the store stalled"


def _experiment(tmp_path: Path, func: str, module: str, arguments: dict[str, Any]) -> Path:
    document = {
        "title": "t", "description": "d",
        "extensions": [{"name": "gameday", "target": "lab", "lease_s": 10}],
        "method": [{"type": "action", "name": "fault", "provider": {
            "type": "python", "module": module, "func": func, "arguments": arguments}}],
        "rollbacks": [{"type": "action", "name": "revert", "provider": {
            "type": "python", "module": module, "func": "revert"}}],
    }
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


@pytest.mark.parametrize(("module", "func", "arguments", "message"), [
    ("faults.storage", "stall", {"storage": {"mount": "store"}, "ops": ["frobnicate"]},
     "method[0].provider.arguments.ops[0]"),
    ("faults.node", "cpu_hog", {"node": "node-0", "cpu_percent": 0}, "must be >= 1.0"),
])
def test_bad_arguments_exit_2_and_inject_nothing(module: str, func: str,
                                                 arguments: dict[str, Any], message: str,
                                                 tmp_path: Path, lab_env: dict[str, str]
                                                 ) -> None:
    result = gameday(["run", str(_experiment(tmp_path, func, module, arguments))], lab_env)
    assert result.returncode == 2, result.stdout + result.stderr
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_a_process_selector_that_matches_nothing_injects_nothing(tmp_path: Path,
                                                         lab_env: dict[str, str]) -> None:
    path = _experiment(tmp_path, "kill", "faults.process", {"process": {"role": "nobody"}})
    result = gameday(["run", str(path)], lab_env)
    assert result.returncode != 0 and "role 'nobody' matches 0 lab processes" in \
        result.stdout + result.stderr


def test_the_lab_node_signals_only_lab_processes(lab_dir: Path,
                                                lab_env: dict[str, str]) -> None:
    from gameday.errors import AgentError

    document = read_json(lab_dir / "lab.json")
    token = Path(document["token_file"]).read_text().strip()
    client = AgentClient(document["nodes"][0]["agent_url"], token)
    with pytest.raises(AgentError, match="is not a process of the lab"):
        client.inject("process.kill", {"pid": os.getpid()}, {}, 10)
    with pytest.raises(AgentError, match="one faultable mount"):
        client.inject("storage.stall", {"mount": "/etc"}, {}, 10)


def test_down_after_kill_9_of_the_supervisor_leaves_nothing(lab_dir: Path) -> None:
    """Last in the module: the supervisor dies without cleaning up (the store stays
    mounted and its fault filesystem may die with it); ``lab down`` must unmount it."""
    info = read_json(lab_dir / "lab.json")
    assert fuse_mounts(lab_dir) == [lab_dir / "store"]
    os.kill(int(info["supervisor_pid"]), signal.SIGKILL)
    time.sleep(0.5)
    lab.down(lab_dir)
    assert fuse_mounts(lab_dir) == []
    assert our_processes(str(lab_dir)) == []
    assert our_cgroups() == []
