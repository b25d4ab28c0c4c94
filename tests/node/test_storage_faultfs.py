"""The fault filesystem on a real FUSE mount: latency, hangs and errors as another process
sees them, switched on and off while it stays mounted; and the host backend layering
it over a directory (bind mount + FUSE). Nothing stays mounted afterwards."""

import errno
import os
import random
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gameday.contract.backend import FaultRequest
from gameday.errors import FaultRejected
from gameday.node.faultfs.mount import FaultFsMount, fuse_mounts, is_mounted
from gameday.node.faultfs.rules import Rule, RuleError, RuleSet, expand_operations, rule_for_fault
from gameday.node.host.fusefs import FaultFsLayers
from gameday.node.host.storage import FuseStorageFault
from tests.node.storage_support import assert_nothing_left

pytestmark = pytest.mark.skipif(not Path("/dev/fuse").exists(), reason="no /dev/fuse here")


def other_process(code: str, timeout: float = 20) -> tuple[float, subprocess.CompletedProcess[str]]:
    """Run ``code`` in another Python process; (seconds it took, its result)."""
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=timeout)
    return time.monotonic() - started, done


@pytest.fixture
def mounted(tmp_path: Path) -> Iterator[FaultFsMount]:
    backing = tmp_path / "gdsto-backing"
    backing.mkdir()
    (backing / "weights.bin").write_bytes(b"w" * 4096)
    fs = FaultFsMount(backing, tmp_path / "gdsto-mnt", tmp_path / "gdsto.sock",
                      log_path=tmp_path / "gdsto-fs.log")
    fs.start()
    try:
        fs.wait_mounted()
        yield fs
    finally:
        fs.stop()
        assert_nothing_left(tmp_path)


def test_passthrough_then_latency_seen_by_another_process(mounted: FaultFsMount) -> None:
    target = mounted.mountpoint / "weights.bin"
    read = f"open({str(target)!r}, 'rb').read()"
    baseline, done = other_process(read)
    assert done.returncode == 0
    mounted.client.set_rule("slow", rule_for_fault("storage.slow",
                                                   {"latency_ms": 400, "ops": ["open"]}))
    slowed, done = other_process(read)
    assert done.returncode == 0 and slowed >= baseline + 0.35, (baseline, slowed)
    assert mounted.client.status()["rules"][0]["hits"] >= 1
    mounted.client.clear("slow")
    (mounted.mountpoint / "new.txt").write_text("through the mount")
    assert (mounted.backing / "new.txt").read_text() == "through the mount"


def test_errors_by_operation_and_errno(mounted: FaultFsMount) -> None:
    target = mounted.mountpoint / "weights.bin"
    mounted.client.set_rule("eio", rule_for_fault("storage.errors",
                                                  {"errno": "EIO", "ops": ["read"]}))
    _, done = other_process(f"open({str(target)!r}, 'rb').read()")
    assert done.returncode == 1 and "Errno 5" in done.stderr
    _, done = other_process(f"import os; print(os.stat({str(target)!r}).st_size)")
    assert done.stdout.strip() == "4096"  # only reads fail
    mounted.client.clear("eio")
    mounted.client.set_rule("full", rule_for_fault("storage.errors", {
        "errno": "ENOSPC", "ops": ["create", "write"], "within": "/ckpt"}))
    (mounted.mountpoint / "ckpt").mkdir()
    _, done = other_process(f"open({str(mounted.mountpoint / 'ckpt' / 'x')!r}, 'w')")
    assert done.returncode == 1 and "Errno 28" in done.stderr
    (mounted.mountpoint / "elsewhere.txt").write_text("fine")  # outside ``within``
    mounted.client.clear("full")
    assert (mounted.mountpoint / "ckpt" / "y").write_text("ok") == 2


def test_hang_until_reverted_releases_every_operation(mounted: FaultFsMount) -> None:
    target = mounted.mountpoint / "weights.bin"
    mounted.client.set_rule("stall", rule_for_fault("storage.stall", {"ops": ["all"]}))
    readers = [subprocess.Popen([sys.executable, "-c", f"open({str(target)!r}).read()"])
               for _ in range(3)]
    try:
        deadline = time.monotonic() + 10
        while mounted.client.status()["hung"] < 3:
            assert time.monotonic() < deadline, mounted.client.status()
            time.sleep(0.05)
        time.sleep(0.3)
        assert all(r.poll() is None for r in readers), "a reader got through a stall"
        assert mounted.client.clear("stall") == 3
        assert [r.wait(timeout=10) for r in readers] == [0, 0, 0]
    finally:
        for reader in readers:
            reader.kill()
            reader.wait()


def test_stall_clears_by_itself_after_duration(mounted: FaultFsMount) -> None:
    target = mounted.mountpoint / "weights.bin"
    mounted.client.set_rule("stall", rule_for_fault("storage.stall", {"duration_s": 1.0}))
    took, done = other_process(f"open({str(target)!r}).read()")
    assert done.returncode == 0 and 0.7 <= took < 8, took


def test_stop_with_a_hung_reader_leaves_nothing_mounted(tmp_path: Path) -> None:
    backing = tmp_path / "gdsto-b2"
    backing.mkdir()
    (backing / "f").write_text("x")
    fs = FaultFsMount(backing, tmp_path / "gdsto-m2", tmp_path / "gdsto2.sock")
    fs.start()
    fs.wait_mounted()
    fs.client.set_rule("stall", Rule(mode="hang", ops=expand_operations(["read"])))
    reader = subprocess.Popen([sys.executable, "-c",
                               f"open({str(fs.mountpoint / 'f')!r}).read()"])
    try:
        deadline = time.monotonic() + 10
        while fs.client.status()["hung"] < 1:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        fs.stop()
        assert reader.wait(timeout=10) == 0  # released, then served before unmounting
    finally:
        reader.kill()
        reader.wait()
    assert not is_mounted(fs.mountpoint)
    assert_nothing_left(tmp_path)


def test_rules_validate_and_percent_is_a_fraction() -> None:
    with pytest.raises(RuleError, match="unknown operation 'frobnicate'"):
        rule_for_fault("storage.errors", {"ops": ["frobnicate"]})
    with pytest.raises(RuleError, match="errno: must be one of"):
        rule_for_fault("storage.errors", {"errno": "EPERM"})
    with pytest.raises(RuleError, match="latency_ms"):
        rule_for_fault("storage.slow", {})
    rules = RuleSet(rng=random.Random(7))
    rules.set("half", rule_for_fault("storage.errors", {"percent": 50, "ops": ["read"]}))
    failed = 0
    for _ in range(400):
        try:
            rules.before("read", "/f")
        except OSError as exc:
            assert exc.errno == errno.EIO
            failed += 1
    assert 150 < failed < 250
    rules.before("write", "/f")  # another operation is untouched


def test_host_backend_layers_over_a_directory_and_removes_the_layer(tmp_path: Path) -> None:
    """``storage.errors`` on a host: the original directory is bind-mounted aside and the
    fault filesystem mounted over it; reverting removes both mounts."""
    data = tmp_path / "gdsto-data"
    data.mkdir()
    (data / "ckpt.bin").write_bytes(b"c" * 100)
    handler = FuseStorageFault("storage.errors", FaultFsLayers(tmp_path / "gdsto-state"))
    if handler.unavailable():
        pytest.skip(str(handler.unavailable()))
    request = FaultRequest("storage.errors", {"path": str(data)},
                           {"errno": "EACCES", "ops": ["open"], "percent": 100})
    try:
        handler.apply("f-1", request)
        assert fuse_mounts(tmp_path) == [data]
        _, done = other_process(f"open({str(data / 'ckpt.bin')!r}, 'rb')")
        assert done.returncode == 1 and "Errno 13" in done.stderr
        inventory = handler.inventory()["mounts"]
        assert any(m["path"] == str(data) and m["faults"] == ["f-1"] for m in inventory)
    finally:
        handler.revert("f-1", request)
        handler.revert("f-1", request)  # idempotent
    _, done = other_process(f"print(len(open({str(data / 'ckpt.bin')!r}, 'rb').read()))")
    assert done.stdout.strip() == "100"
    assert not is_mounted(data) and fuse_mounts(tmp_path) == []
    with pytest.raises(FaultRejected, match="not a directory"):
        handler.apply("f-2", FaultRequest("storage.errors", {"path": "/"}, {}))
    assert_nothing_left(tmp_path)


def test_paths_are_checked_before_anything_is_layered(tmp_path: Path) -> None:
    """``..``, a symlink, a file or a relative path is refused before any mount."""
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    (tmp_path / "file").write_text("x")
    fault = FuseStorageFault("storage.stall", FaultFsLayers(tmp_path / "state"))
    for target, message in [({"path": f"{real}/../real"}, "no '.' or '..'"),
                            ({"path": str(tmp_path / "link")}, "goes through a symlink"),
                            ({"path": str(tmp_path / "file")}, "is not a directory"),
                            ({"path": "relative/dir"}, "absolute directory"),
                            ({"path": str(real), "x": 1}, "target.x is unknown")]:
        with pytest.raises(FaultRejected, match=message):
            fault.apply("s-bad", FaultRequest("storage.stall", target, {}))
    assert not (tmp_path / "state").exists()


def test_the_freezer_refuses_the_agent_and_its_cgroup(tmp_path: Path) -> None:
    fault = FuseStorageFault("storage.stall", FaultFsLayers(tmp_path / "state"))
    with pytest.raises(FaultRejected, match=r"pid [0-9]+: this process|a thread of this agent"):
        fault.apply("s-me", FaultRequest("storage.stall", {"pid": os.getpid()},
                                         {"mechanism": "freezer"}))
    with pytest.raises(FaultRejected, match=r"holds this agent|not under /sys/fs/cgroup"):
        fault.apply("s-root", FaultRequest("storage.stall", {"cgroup": "/sys/fs/cgroup/"
                                                             "freezer"},
                                           {"mechanism": "freezer"}))
