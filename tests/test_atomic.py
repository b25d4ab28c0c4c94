"""Atomic replaces (gameday/atomic.py) on the real filesystem, with real forks: the
temporary name a thread keeps per path, and the directory a writer keeps open."""

import os
import stat
import subprocess
from pathlib import Path

import pytest

from gameday.atomic import DirectorySync, create_temporary, replace_file


def open_fds() -> set[int]:
    return {int(name) for name in os.listdir("/proc/self/fd")}


def kept_fd(sync: DirectorySync) -> int | None:
    return sync._fd


def test_a_thread_keeps_its_temporary_name_and_still_never_follows_a_link(
        tmp_path: Path) -> None:
    target = tmp_path / "state.json"
    fd, first = create_temporary(target)
    os.close(fd)
    os.unlink(first)
    victim = tmp_path / "victim"
    victim.write_text("untouched")
    os.symlink(victim, first)  # planted where the kept name points
    fd, again = create_temporary(target)
    os.close(fd)
    assert again == first and not os.path.islink(again) and os.path.getsize(again) == 0
    os.unlink(again)
    Path(first).write_text("a leftover")
    replace_file(target, b"new", mode=0o600, durable=True)
    assert target.read_bytes() == b"new" and victim.read_text() == "untouched"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json", "victim"]


def test_a_forked_child_names_its_own_temporary_and_closes_the_kept_directory(
        tmp_path: Path) -> None:
    target = tmp_path / "state.json"
    sync = DirectorySync(tmp_path)
    replace_file(target, b"parent", durable=True, directory=sync)
    fd, parent_name = create_temporary(target)
    os.close(fd)
    os.unlink(parent_name)
    inherited = kept_fd(sync)
    assert inherited is not None
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report, then leave at once
        try:
            closed = kept_fd(sync) is None
            try:
                os.fstat(inherited)
            except OSError:
                pass
            else:
                closed = False
            fd, child_name = create_temporary(target)
            os.close(fd)
            os.unlink(child_name)
            replace_file(target, b"child", durable=True, directory=sync)
            os.write(write, f"{closed} {child_name}".encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        report, child_name = pipe.read().split(" ")
    os.waitpid(pid, 0)
    assert report == "True"  # the child had closed its copy of the kept directory
    assert child_name != parent_name and f".{pid}-" in child_name
    assert target.read_bytes() == b"child"
    assert kept_fd(sync) == inherited  # the parent's is its own, still open
    os.fstat(inherited)
    sync.close()


def test_a_kept_directory_is_opened_once_closed_on_close_and_opened_again(
        tmp_path: Path) -> None:
    before = open_fds()
    sync = DirectorySync(tmp_path)
    for i in range(5):
        replace_file(tmp_path / "f", str(i).encode(), durable=True, directory=sync)
    assert len(open_fds() - before) == 1
    sync.close()
    assert open_fds() == before
    replace_file(tmp_path / "f", b"again", durable=True, directory=sync)
    assert len(open_fds() - before) == 1
    del sync  # collected: closed
    assert open_fds() == before


def test_a_removed_directory_is_made_again_and_the_new_one_is_synced(tmp_path: Path) -> None:
    directory = tmp_path / "state"
    sync = DirectorySync(directory)
    replace_file(directory / "f", b"one", durable=True, directory=sync)
    (directory / "f").unlink()
    directory.rmdir()
    replace_file(directory / "f", b"two", durable=True, directory=sync)
    fd = kept_fd(sync)
    assert fd is not None and os.fstat(fd).st_ino == directory.stat().st_ino
    assert (directory / "f").read_bytes() == b"two"
    sync.close()


def test_a_failed_directory_fsync_opens_the_directory_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``os.fsync`` is swapped for one that fails on the kept directory once."""
    sync = DirectorySync(tmp_path)
    replace_file(tmp_path / "f", b"one", durable=True, directory=sync)
    bad = [kept_fd(sync)]
    real_fsync = os.fsync

    def failing_once(fd: int) -> None:
        if fd in bad:
            bad.clear()
            raise OSError(5, "I/O error")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", failing_once)
    replace_file(tmp_path / "f", b"two", durable=True, directory=sync)
    assert kept_fd(sync) is None  # closed; the next save opens it afresh
    replace_file(tmp_path / "f", b"three", durable=True, directory=sync)
    assert kept_fd(sync) is not None and (tmp_path / "f").read_bytes() == b"three"
    sync.close()


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002, 0o027])
def test_shared_outputs_follow_the_umask_and_secrets_do_not(tmp_path: Path, umask: int) -> None:
    """A report page written by ``gameday report -o`` (a real CLI process started under
    the umask) gets 0o666 less the umask, as any tool's output would; a key stays 0600."""
    from tests.conftest import BIN, REPO, cli_env
    from tests.report.reports_helpers import DATA

    page = tmp_path / "page.html"
    key = tmp_path / "k.key"
    env = cli_env(tmp_path)
    for argv in (["report", str(DATA / "flagship-journal.json"), "-o", str(page)],
                 ["audit", "keygen", str(key)]):
        result = subprocess.run([str(BIN / "gameday"), *argv], env=env, cwd=REPO, text=True,
                                capture_output=True, timeout=60,
                                preexec_fn=lambda: os.umask(umask))
        assert result.returncode == 0, result.stderr
    assert stat.S_IMODE(page.stat().st_mode) == 0o666 & ~umask
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
