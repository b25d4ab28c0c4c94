"""Atomic file replaces: write a temporary file next to the target, rename it over.

Readers see the old or the new file, never a torn one. :func:`replace_file` with
``durable=True`` also makes the new content and the rename survive a crash (even
``kill -9`` or a power cut): the file is fsynced before the rename, its directory after.
"""

import contextlib
import os
import threading
from pathlib import Path
from typing import Final

__all__ = ["create_temporary", "replace_file"]

#: The permission bits at most that :func:`create_temporary` creates a file with.
_CREATED_BITS: Final = 0o600


def replace_file(path: Path, data: bytes, *, mode: int = 0o644, durable: bool = False) -> None:
    """Replace ``path`` with ``data`` atomically, with permissions ``mode``; ``durable``:
    fsync the file and, after the rename, its directory. A ``mode`` within the owner's
    read and write bits (``0o600``, the agent's state file) is the one the temporary file
    is created with (:func:`create_temporary`; a umask never takes the owner's bits in
    practice), so no ``fchmod`` is spent on it; a wider one is set exactly."""
    fd, tmp = create_temporary(path, mode)
    try:
        try:
            if mode & ~_CREATED_BITS:
                os.fchmod(fd, mode)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if durable:
        _fsync_directory(os.path.dirname(tmp))


def create_temporary(path: Path, mode: int = 0o600) -> tuple[int, str]:
    """A new, empty file next to ``path`` that only this thread writes, open for writing:
    ``(fd, name)``. Named by process and thread (cheaper than :func:`tempfile.mkstemp`'s
    random names, as safe: created with ``O_EXCL | O_NOFOLLOW``, so never an existing
    file or a link). A leftover of a dead process that had the same pid is removed
    first; the directory is made on first use. Created with ``mode & 0o600`` (less the
    umask)."""
    directory, name = os.path.split(path)
    tmp = os.path.join(directory, f".{name}.{os.getpid()}-{threading.get_ident()}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    for _ in range(3):
        try:
            return os.open(tmp, flags, mode & 0o600), tmp
        except FileNotFoundError:
            Path(directory).mkdir(parents=True, exist_ok=True)
        except FileExistsError:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
    return os.open(tmp, flags, mode & 0o600), tmp


def _fsync_directory(directory: str) -> None:
    """Make a rename in ``directory`` durable (best effort: not every filesystem can)."""
    try:
        dir_fd = os.open(directory or ".", os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dir_fd)
    except OSError:
        pass
    finally:
        os.close(dir_fd)
