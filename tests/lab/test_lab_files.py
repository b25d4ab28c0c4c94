"""Atomic writes (gameday/lab/files.py over gameday/atomic.py) on the real filesystem: no
stand-ins (but for an ``os.fchmod`` that refuses, to show when it is not called)."""

import os
import threading
from pathlib import Path

import pytest

from gameday.atomic import replace_file
from gameday.lab.files import read_json, write_atomic, write_json_atomic


def _temporary(path: Path) -> Path:
    return path.parent / f".{path.name}.{os.getpid()}-{threading.get_ident()}.tmp"


def test_a_write_replaces_the_file_whole_and_leaves_nothing_beside_it(tmp_path: Path) -> None:
    target = tmp_path / "new" / "dir" / "state.json"  # the directory is made on first use
    write_json_atomic(target, {"a": 1})
    write_json_atomic(target, {"a": 2}, mode=0o600)
    assert read_json(target) == {"a": 2}
    assert target.stat().st_mode & 0o777 == 0o600
    assert sorted(p.name for p in target.parent.iterdir()) == ["state.json"]


def test_a_leftover_temporary_is_replaced_and_a_link_there_is_never_followed(
        tmp_path: Path) -> None:
    target = tmp_path / "gpu-0.json"
    _temporary(target).write_text("half a write of a dead process")
    write_atomic(target, "one")
    assert target.read_text() == "one"
    victim = tmp_path / "victim"
    victim.write_text("untouched")
    _temporary(target).symlink_to(victim)
    write_atomic(target, "two")
    assert target.read_text() == "two" and not target.is_symlink()
    assert victim.read_text() == "untouched"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gpu-0.json", "victim"]


def test_threads_writing_the_same_file_never_tear_it(tmp_path: Path) -> None:
    target = tmp_path / "shared.json"
    errors: list[BaseException] = []

    def writer(n: int) -> None:
        try:
            for i in range(50):
                write_json_atomic(target, {"writer": n, "i": i, "pad": "x" * 2000})
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for _ in range(200):
        data = read_json(target)
        assert data is None or data["pad"] == "x" * 2000
    for thread in threads:
        thread.join()
    assert errors == [] and read_json(target)["i"] == 49
    assert sorted(p.name for p in tmp_path.iterdir()) == ["shared.json"]


def test_the_mode_is_set_exactly_whatever_the_umask_and_0o600_needs_no_chmod(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``os.fchmod`` is swapped for one that fails, to show the state file's mode (0o600)
    comes from creating the file and that a wider mode is still set through it."""
    previous = os.umask(0o077)
    try:
        write_atomic(tmp_path / "wide", "x", mode=0o644)  # wider than the umask lets through
        assert (tmp_path / "wide").stat().st_mode & 0o777 == 0o644

        def refuse(fd: int, mode: int) -> None:
            raise AssertionError(f"fchmod({mode:o}) for a mode the file was created with")

        monkeypatch.setattr(os, "fchmod", refuse)
        replace_file(tmp_path / "state", b"{}", mode=0o600, durable=True)
        assert (tmp_path / "state").stat().st_mode & 0o777 == 0o600
        with pytest.raises(AssertionError):
            write_atomic(tmp_path / "wide", "y", mode=0o640)
        assert (tmp_path / "wide").read_text() == "x"  # a failed write leaves the file
    finally:
        os.umask(previous)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state", "wide"]
