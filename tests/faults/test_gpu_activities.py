"""The GPU fault actions: catalogue entries, argument checks that refuse bad input
before anything is injected (activities called with no target, and the real
``gameday validate`` / ``gameday faults`` command lines)."""

from pathlib import Path
from typing import Any

import pytest
import yaml
from chaoslib.exceptions import ActivityFailed

from faults import gpu
from gameday.experiment.loader import load_experiment
from gameday.kinds import CATALOGUE, by_activity
from tests.conftest import cli_env, gameday

EXPERIMENTS = ("gpu-oom-restart", "gpu-thermal-throttle", "gpu-fall-off-bus")


@pytest.mark.parametrize(("func", "kind"), [
    ("oom", "gpu.oom"), ("xid_error", "gpu.xid"), ("thermal_throttle", "gpu.thermal"),
    ("fall_off_bus", "gpu.fall_off_bus"), ("ecc_error", "gpu.ecc")])
def test_each_action_is_the_activity_of_its_catalogue_entry(func: str, kind: str) -> None:
    assert func in gpu.__all__ and callable(getattr(gpu, func))
    entry = by_activity("faults.gpu", func)
    assert entry is not None and entry.name == kind and CATALOGUE[kind] is entry


@pytest.mark.parametrize(("arguments", "message"), [
    ({}, "exactly one of size_bytes or fraction, got neither"),
    ({"size_bytes": 10, "fraction": 0.5}, "got size_bytes and fraction"),
    ({"fraction": 0.0}, "arguments.fraction: must be > 0"),
])
def test_oom_refuses_bad_sizes_before_touching_a_target(arguments: dict[str, Any],
                                                        message: str) -> None:
    with pytest.raises(ActivityFailed, match=message):
        gpu.oom({"holding_shard": 0}, **arguments)


def test_thermal_and_xid_check_their_arguments_with_the_catalogue() -> None:
    with pytest.raises(ActivityFailed, match=r"arguments\.clock_ratio: must be > 0"):
        gpu.thermal_throttle({"holding_shard": 0}, clock_ratio=0.0)
    with pytest.raises(ActivityFailed, match="must be one of sw_thermal, hw_thermal"):
        gpu.thermal_throttle({"holding_shard": 0}, reason="warm")
    with pytest.raises(ActivityFailed, match="must be <= 999"):
        gpu.xid_error({"holding_shard": 0}, xid=1000)


def test_a_bad_fault_argument_in_an_experiment_is_refused_by_validate(tmp_path: Path) -> None:
    document = yaml.safe_load(Path("experiments/gpu-thermal-throttle.yaml").read_text())
    document["method"][0]["provider"]["arguments"]["clock_ratio"] = 2
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(document, sort_keys=False))
    result = gameday(["validate", str(bad)], cli_env(tmp_path), timeout=60)
    assert result.returncode == 2, result.stdout + result.stderr
    out = result.stdout + result.stderr
    assert "clock_ratio" in out and "must be <= 1" in out


def test_the_gpu_experiments_load_and_the_kinds_are_listed() -> None:
    for name in EXPERIMENTS:
        loaded = load_experiment(Path(f"experiments/{name}.yaml"))
        extension = next(e for e in loaded.experiment["extensions"] if e["name"] == "gameday")
        assert extension["coverage"]["layer"] == "device"
        assert extension["coverage"]["fault"] in CATALOGUE
    listing = {k.name: k.to_json() for k in CATALOGUE.values()}
    assert listing["gpu.oom"]["injected_at"] == {"lab": "virtual", "host": "device"}
    assert listing["gpu.thermal"]["injected_at"]["host"] == "telemetry"
    assert listing["gpu.fall_off_bus"]["params"]["required"] == []
    assert set(listing["gpu.fall_off_bus"]["params"]["properties"]) == {"gpu", "lease_s"}
