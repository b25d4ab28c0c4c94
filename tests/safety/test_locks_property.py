"""Target locks as a property, checked on the kernel's locks: for random and adversarial
keys (GPU keys of nodes whose names look like keys, indexes past the GPU range, keys of
other targets), a second run is refused exactly at the first key the first run holds,
keeps what it took before it, and every key either run says it holds is a byte the
kernel holds locked (``F_OFD_GETLK`` from an open file description of the test's own).
A node's GPUs locked together are one lock in the kernel's list (``/proc/locks``)."""

import fcntl
import os
import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gameday.safety import locks
from gameday.safety.locks import TargetLocked, TargetLocks, target_key

_FLOCK = struct.Struct("hhqqi4x")
NODES = ["node-0", "node-1", "ip-10-0-0-1.ec2.internal", "a.gpu-1", "n.link-x"]


def gpu_keys() -> st.SearchStrategy[str]:
    return st.builds(lambda node, index: target_key(node, {"gpu": index}),
                     st.sampled_from(NODES), st.integers(0, 1100))


def other_keys() -> st.SearchStrategy[str]:
    return st.builds(lambda node, link: target_key(node, {"link": link}),
                     st.sampled_from(NODES), st.sampled_from(["eth0", "x.gpu-3", "gpu-2"]))


KEYS = st.lists(st.one_of(gpu_keys(), gpu_keys(), other_keys()), max_size=40)


def locked_in_kernel(directory: Path, key: str) -> bool:
    """Whether the byte of ``key`` is write-locked, asked of the kernel from a new open
    file description (which holds nothing)."""
    offset = locks._offset(key)
    path = directory / locks._lock_file(locks._file_number(offset))
    if not path.exists():
        return False
    fd = os.open(path, os.O_RDWR)
    try:
        answer = fcntl.fcntl(fd, fcntl.F_OFD_GETLK,
                             _FLOCK.pack(fcntl.F_WRLCK, os.SEEK_SET, offset, 1, 0))
    finally:
        os.close(fd)
    return _FLOCK.unpack(answer)[0] != fcntl.F_UNLCK


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(first=KEYS, second=KEYS, chunk=st.integers(1, 8))
def test_a_second_run_is_refused_at_the_first_held_key_and_the_kernel_agrees(
        tmp_path_factory: pytest.TempPathFactory, first: list[str], second: list[str],
        chunk: int) -> None:
    directory = tmp_path_factory.mktemp("locks")
    a, b = TargetLocks(directory, "run-a"), TargetLocks(directory, "run-b")
    try:
        for start in range(0, len(first), chunk):  # in batches, as nodes' batches land
            a.acquire_many(first[start:start + chunk])
        assert set(a.held()) == set(first)
        clash = next((i for i, key in enumerate(second) if key in set(first)), None)
        if clash is None:
            b.acquire_many(second)
            assert set(b.held()) == set(second)
        else:
            with pytest.raises(TargetLocked) as refused:
                b.acquire_many(second)
            assert refused.value.index == clash
            assert f"target {second[clash]} is locked by run run-a" in str(refused.value)
            assert set(b.held()) == set(second[:clash])
        for key in {*first, *b.held()}:
            assert locked_in_kernel(directory, key), key
        a.release_all()
        for key in set(first) - set(b.held()):
            assert not locked_in_kernel(directory, key), key
        b.acquire_many(first)  # all free now
        assert set(b.held()) >= set(first)
    finally:
        a.release_all()
        b.release_all()


def test_a_nodes_gpus_locked_together_are_one_kernel_lock(tmp_path: Path) -> None:
    run = TargetLocks(tmp_path, "run-a")
    try:
        run.acquire_many([target_key("node-7", {"gpu": index}) for index in range(8)])
        offset = locks._offset(target_key("node-7", {"gpu": 0}))
        path = tmp_path / locks._lock_file(locks._file_number(offset))
        inode = os.stat(path).st_ino
        mine = [line.split() for line in Path("/proc/locks").read_text().splitlines()
                if line.split()[5].endswith(f":{inode}")]
        assert [(fields[1], fields[3], int(fields[6]), int(fields[7])) for fields in mine] == [
            ("OFDLCK", "WRITE", offset, offset + 7)]
    finally:
        run.release_all()
