"""Atomic writes (gameday/lab/files.py over gameday/atomic.py) on the real filesystem: no
stand-ins."""

import os
import threading
from pathlib import Path

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
