"""The passthrough filesystem: every operation asks the :class:`RuleSet` first, then does
the real thing on the backing directory.

The kernel is told not to cache (``direct_io``, zero attribute and entry timeouts), so
every read, write and lookup of another process really reaches this filesystem and
meets the active faults.
"""

import errno
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import mfusepy

from gameday.node.faultfs.rules import FaultRaised, RuleSet

__all__ = ["FaultFilesystem"]

T = TypeVar("T")

_STAT_KEYS = ("st_atime", "st_ctime", "st_gid", "st_mode", "st_mtime", "st_nlink", "st_size",
              "st_uid", "st_blocks", "st_blksize", "st_rdev", "st_ino")
_STATVFS_KEYS = ("f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail", "f_ffree",
                 "f_files", "f_flag", "f_frsize", "f_namemax")


def _now_ns() -> tuple[int, int]:
    now = time.time_ns()
    return now, now


class FaultFilesystem(mfusepy.Operations):  # type: ignore[misc]
    """A passthrough to ``backing`` whose operations meet ``rules`` first."""

    use_ns = True

    def __init__(self, backing: Path, rules: RuleSet) -> None:
        self.backing = str(backing.resolve())
        self.rules = rules

    def _real(self, path: str) -> str:
        return self.backing + path

    def _run(self, op: str, path: str, call: Callable[[], T]) -> T:
        try:
            self.rules.before(op, path)
            return call()
        except FaultRaised as exc:
            raise mfusepy.FuseOSError(exc.errno) from None
        except OSError as exc:
            raise mfusepy.FuseOSError(exc.errno or errno.EIO) from None

    def _do(self, op: str, path: str, call: Callable[[], object]) -> int:
        """Like :meth:`_run` for an operation that returns nothing: 0 on success."""
        self._run(op, path, call)
        return 0

    # -- setup -------------------------------------------------------------------------
    def init_with_config(self, conn_info: Any, config: Any) -> None:
        if config is not None:
            config.entry_timeout = 0.0
            config.negative_timeout = 0.0
            config.attr_timeout = 0.0
            config.direct_io = 1
            config.use_ino = 1

    def destroy(self, path: str) -> None:
        self.rules.close()

    # -- metadata ----------------------------------------------------------------------
    def getattr(self, path: str, fh: int | None = None) -> dict[str, Any]:
        def stat() -> dict[str, Any]:
            st = os.fstat(fh) if fh is not None else os.lstat(self._real(path))
            attrs = {key: getattr(st, key) for key in _STAT_KEYS}
            for key in ("st_atime", "st_ctime", "st_mtime"):
                attrs[key] = getattr(st, key + "_ns")
            return attrs
        return self._run("getattr", path, stat)

    def access(self, path: str, amode: int) -> int:
        def check() -> int:
            if not os.access(self._real(path), amode):
                raise OSError(errno.EACCES, "access denied")
            return 0
        return self._run("access", path, check)

    def readdir(self, path: str, fh: int) -> Iterator[tuple[str, dict[str, int], int]]:
        def scan() -> list[tuple[str, dict[str, int], int]]:
            here = os.lstat(self._real(path))
            entries = [(".", {"st_ino": here.st_ino, "st_mode": here.st_mode}, 0),
                       ("..", {"st_ino": 1, "st_mode": here.st_mode}, 0)]
            with os.scandir(self._real(path)) as scan:
                for entry in scan:
                    st = entry.stat(follow_symlinks=False)
                    entries.append((entry.name, {"st_ino": st.st_ino, "st_mode": st.st_mode}, 0))
            return entries
        return iter(self._run("readdir", path, scan))

    def readlink(self, path: str) -> str:
        return self._run("readlink", path, lambda: os.readlink(self._real(path)))

    def statfs(self, path: str) -> dict[str, Any]:
        def stat() -> dict[str, Any]:
            st = os.statvfs(self._real(path))
            return {key: getattr(st, key) for key in _STATVFS_KEYS}
        return self._run("statfs", path, stat)

    def chmod(self, path: str, mode: int) -> int:
        return self._do("chmod", path, lambda: os.chmod(self._real(path), mode))

    def chown(self, path: str, uid: int, gid: int) -> int:
        return self._do("chown", path, lambda: os.lchown(self._real(path), uid, gid))

    def utimens(self, path: str, times: tuple[int, int] | None = None) -> int:
        return self._do("utimens", path,
                        lambda: os.utime(self._real(path), ns=times or _now_ns(),
                                         follow_symlinks=False))

    # -- namespace ---------------------------------------------------------------------
    def mkdir(self, path: str, mode: int) -> int:
        return self._do("mkdir", path, lambda: os.mkdir(self._real(path), mode))

    def rmdir(self, path: str) -> int:
        return self._do("rmdir", path, lambda: os.rmdir(self._real(path)))

    def unlink(self, path: str) -> int:
        return self._do("unlink", path, lambda: os.unlink(self._real(path)))

    def rename(self, old: str, new: str) -> int:
        return self._do("rename", old, lambda: os.rename(self._real(old), self._real(new)))

    def link(self, target: str, source: str) -> int:
        return self._do("link", target, lambda: os.link(self._real(source), self._real(target)))

    def symlink(self, target: str, source: str) -> int:
        return self._do("symlink", target, lambda: os.symlink(source, self._real(target)))

    # -- files -------------------------------------------------------------------------
    def open(self, path: str, flags: int) -> int:
        return self._run("open", path, lambda: os.open(self._real(path), flags))

    def create(self, path: str, mode: int, flags: int = os.O_WRONLY | os.O_TRUNC) -> int:
        return self._run("create", path,
                         lambda: os.open(self._real(path), flags | os.O_CREAT, mode))

    def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
        return self._run("read", path, lambda: os.pread(fh, size, offset))

    def write(self, path: str, data: bytes, offset: int, fh: int) -> int:
        return self._run("write", path, lambda: os.pwrite(fh, data, offset))

    def truncate(self, path: str, length: int, fh: int | None = None) -> int:
        def cut() -> int:
            if fh is not None:
                os.ftruncate(fh, length)
            else:
                os.truncate(self._real(path), length)
            return 0
        return self._run("truncate", path, cut)

    def flush(self, path: str, fh: int) -> int:
        return self._run("flush", path, lambda: 0)

    def fsync(self, path: str, datasync: int, fh: int) -> int:
        return self._do("fsync", path, lambda: (os.fdatasync(fh) if datasync else os.fsync(fh)))

    def release(self, path: str, fh: int) -> int:
        try:
            self.rules.before("release", path)
        finally:
            os.close(fh)  # never leak the backing descriptor, even when failing the release
        return 0
