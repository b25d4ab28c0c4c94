"""The fault catalogue is complete, consistent with its activities, and documented."""

import inspect
import json
import os
import subprocess
from pathlib import Path

import pytest

from faults.reference import catalogue_markdown
from gameday.contract.backend import INJECTION_LAYERS
from gameday.experiment.extension import COVERAGE_LAYERS
from gameday.kinds import CATALOGUE
from tests.conftest import REPO, gameday

KINDS = sorted(CATALOGUE)


def test_every_kind_of_the_design_is_in_the_catalogue() -> None:
    expected = {"gpu.oom", "gpu.ecc", "gpu.thermal", "gpu.fall_off_bus", "net.link_flap",
                "net.loss", "net.partition", "storage.stall", "storage.errors", "storage.slow",
                "process.kill", "process.pause", "node.cpu_hog", "node.memory_hog",
                "service.latency", "service.timeout", "k8s.pod_kill", "k8s.node_cordon",
                "k8s.node_drain", "k8s.node_taint"}
    assert expected <= set(CATALOGUE)


@pytest.mark.parametrize("name", KINDS)
def test_kind_matches_its_activity(name: str) -> None:
    kind = CATALOGUE[name]
    module = __import__(kind.module, fromlist=[kind.func])
    func = getattr(module, kind.func)
    assert kind.func in module.__all__
    parameters = inspect.signature(func).parameters
    for param in kind.params:
        assert param.name in parameters, f"{kind.module}.{kind.func} lacks {param.name}"
    if kind.selector:
        assert kind.selector in parameters
    assert kind.coverage_layer in COVERAGE_LAYERS
    assert set(kind.injected_at.values()) <= set(INJECTION_LAYERS)
    assert func.__doc__ and kind.summary and kind.seen_through


def test_docs_reference_is_generated_from_the_catalogue() -> None:
    text = (REPO / "docs" / "faults.md").read_text()
    assert catalogue_markdown() in text, "run: .venv/bin/python -m faults.reference"


def test_faults_command_lists_every_kind(tmp_path: Path) -> None:
    from tests.conftest import cli_env

    result = gameday(["faults", "--json"], cli_env(tmp_path))
    assert result.returncode == 0
    listed = {entry["kind"] for entry in json.loads(result.stdout)["kinds"]}
    assert listed == set(CATALOGUE)
    text = gameday(["faults"], cli_env(tmp_path)).stdout
    assert all(name in text for name in CATALOGUE)


def test_faults_into_a_closed_pipe_exits_quietly(tmp_path: Path) -> None:
    """``gameday faults | head -1``: the reader is gone before gameday writes (its end of
    a real pipe closed first), so every write fails with EPIPE."""
    from tests.conftest import BIN, cli_env

    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        result = subprocess.run([str(BIN / "gameday"), "faults"], env=cli_env(tmp_path),
                                cwd=REPO, stdout=write_end, stderr=subprocess.PIPE,
                                text=True, timeout=120)
    finally:
        os.close(write_end)
    assert (result.returncode, result.stderr) == (141, "")
