"""node.cpu_hog / node.memory_hog: real hogs (stress-ng, and the Python fallback) in real
cgroups, whose bounds hold; revert kills them and removes the cgroups."""

import time
from pathlib import Path

import pytest

from gameday.contract.backend import FaultRequest
from gameday.node.cgroups import detect
from gameday.node.hogs import MIB, hog_group
from gameday.node.host.hogs import HostHogFault
from gameday.node.processes import process_ref
from tests.node.storage_support import PREFIX, PREFIX_ENV, assert_nothing_left


@pytest.fixture(autouse=True)
def cgroup_prefix(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(PREFIX_ENV, PREFIX)


def _cpu_usage_ns(group_paths: list[Path]) -> int | None:
    for path in group_paths:
        usage = path / "cpuacct.usage"
        if usage.exists():
            return int(usage.read_text())
    return None


def test_cpu_hog_is_held_to_its_quota(tmp_path: Path) -> None:
    hog = HostHogFault("node.cpu_hog")
    if hog.unavailable():
        pytest.skip(str(hog.unavailable()))
    request = FaultRequest("node.cpu_hog", {"node": "here"},
                           {"workers": 2, "cpu_percent": 5, "duration_s": 30})
    details = hog.apply("c-1", request)
    group = hog_group("node.cpu_hog", "c-1")
    try:
        assert details["hog"] == "stress-ng" and details["cgroup"].startswith(PREFIX)
        time.sleep(0.3)  # let stress-ng fork its workers (inside the group)
        start_ns, started = _cpu_usage_ns(group.paths()), time.monotonic()
        deadline = time.monotonic() + 10  # on a loaded machine the workers start late
        while group.cpu_throttled() == 0 and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(1.0)
        used_ns, wall = _cpu_usage_ns(group.paths()), time.monotonic() - started
        assert len(group.pids()) >= 3  # the stress-ng parent and two workers, all inside
        assert group.cpu_throttled() > 0, "the quota never held the hog back"
        if start_ns is not None and used_ns is not None:
            share = (used_ns - start_ns) / 1e9 / wall
            assert share <= 0.05 * 2, f"the hog used {share:.2f} CPUs, quota 0.05"
    finally:
        hog.revert("c-1", request)
        hog.revert("c-1", request)  # idempotent
    assert not group.exists()
    assert process_ref(details["pid"]) is None
    assert_nothing_left(tmp_path)


@pytest.mark.parametrize("use_stress_ng", [True, False], ids=["stress-ng", "python"])
def test_memory_hog_never_exceeds_its_limit(tmp_path: Path, use_stress_ng: bool) -> None:
    hog = HostHogFault("node.memory_hog", use_stress_ng=use_stress_ng)
    if hog.unavailable():
        pytest.skip(str(hog.unavailable()))
    request = FaultRequest("node.memory_hog", {"node": "here"},
                           {"memory_mib": 48, "limit_mib": 64, "duration_s": 30})
    details = hog.apply("m-1", request)
    group = hog_group("node.memory_hog", "m-1")
    try:
        assert details["bound"]["memory_limit_mib"] == 64
        deadline = time.monotonic() + 10
        while (group.memory_peak() or 0) < 40 * MIB:
            assert time.monotonic() < deadline, f"the hog never held its memory " \
                                                f"({group.memory_peak()} bytes)"
            time.sleep(0.05)
        assert (group.memory_peak() or 0) <= 64 * MIB
    finally:
        hog.revert("m-1", request)
    assert not group.exists()
    assert_nothing_left(tmp_path)


def test_detect_reads_v1_and_v2_hierarchies(tmp_path: Path) -> None:
    """The mount table decides: a v1 hierarchy per controller, else v2 where its root
    offers the controller (a v2 without controllers can only freeze)."""
    v2_root = tmp_path / "unified"
    v2_root.mkdir()
    (v2_root / "cgroup.controllers").write_text("memory pids\n")
    table = tmp_path / "mountinfo"
    table.write_text(
        "30 25 0:26 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n"
        f"31 25 0:27 / {v2_root} rw - cgroup2 cgroup2 rw\n")
    found = detect(table)
    assert found.version("cpu") == 1 and found.version("memory") == 2
    assert found.version("freezer") == 2 and found.version("blkio") is None
    (v2_root / "cgroup.controllers").write_text("\n")
    assert detect(table).version("memory") is None
    assert "freeze/kill only" in detect(table).describe()
