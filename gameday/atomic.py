"""Atomic file replaces: write a temporary file next to the target, rename it over.

Readers see the old or the new file, never a torn one. :func:`replace_file` with
``durable=True`` also makes the new content and the rename survive a crash (even
``kill -9`` or a power cut): the file is fsynced before the rename, its directory after.
A writer that replaces files in one directory often (the agent's state file) keeps that
directory open between its renames (:class:`DirectorySync`) instead of opening it for
each fsync.
"""

import contextlib
import os
import threading
import weakref
from pathlib import Path
from typing import Final

__all__ = ["DirectorySync", "create_temporary", "replace_file", "shareable_mode"]

#: The permission bits at most that :func:`create_temporary` creates a file with.
_CREATED_BITS: Final = 0o600
_CREATE_FLAGS: Final = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
#: How many targets' temporary names a thread keeps (then it forgets them all).
_NAMES_KEPT: Final = 256


class _TemporaryNames(threading.local):
    """This thread's temporary names, by target path: ``(directory, temporary)``."""

    def __init__(self) -> None:
        self.names: dict[str | os.PathLike[str], tuple[str, str]] = {}


_names = _TemporaryNames()


class DirectorySync:
    """Makes renames in ``directory`` durable (best effort: not every filesystem can),
    with the directory opened on first use and kept open until :meth:`close`.

    Not for several threads at once: its user serialises its calls (the agent saves its
    state under the registry's lock). A fork does not share the open directory: the
    child closes its copy at once and opens its own on first use. The directory is
    opened again when an fsync fails, or when :func:`replace_file` had to make it again
    (it had been removed). Closed when collected, if not before.
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = os.fspath(directory) or "."
        self._fd: int | None = None
        _open_syncs.add(self)

    def sync(self) -> None:
        """Fsync the directory (after a rename in it)."""
        fd = self._fd
        if fd is None:
            fd = self._open()
            if fd is None:
                return
        try:
            os.fsync(fd)
        except OSError:
            self.close()  # a directory that went bad: once more, freshly opened
            _fsync_directory(self.directory)

    def close(self) -> None:
        """Close the directory, if open (it is opened again on the next :meth:`sync`)."""
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)

    def __del__(self) -> None:
        self.close()

    def _open(self) -> int | None:
        try:
            self._fd = os.open(self.directory, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return None
        return self._fd


#: Every :class:`DirectorySync` alive, so that a forked child closes their copies.
_open_syncs: "weakref.WeakSet[DirectorySync]" = weakref.WeakSet()


def _after_fork_in_child() -> None:
    """In a forked child: forget the parent's temporary names (named by its pid) and
    close the copies of the directories the parent keeps open."""
    global _names
    _names = _TemporaryNames()
    for sync in list(_open_syncs):
        sync.close()


os.register_at_fork(after_in_child=_after_fork_in_child)


def shareable_mode() -> int:
    """The mode of an output meant to be shared (a report page, a JUnit file): read and
    write for everyone, less this process's umask, as ``open()`` would make it. Secrets
    (keys, tokens, the agent's state) are written 0600 instead, whatever the umask."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return 0o666 & ~int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)  # no /proc: read it by setting it (and put it back)
    os.umask(mask)
    return 0o666 & ~mask


def replace_file(path: Path, data: bytes, *, mode: int = 0o644, durable: bool = False,
                 directory: DirectorySync | None = None, exclusive: bool = False) -> None:
    """Replace ``path`` with ``data`` atomically, with permissions ``mode``; ``durable``:
    fsync the file and, after the rename, its directory (through ``directory``, the
    path's kept open, if given); ``exclusive``: never over an existing file (the
    temporary file is hard-linked to ``path``, which raises ``FileExistsError`` if it
    exists, instead of renamed over it). A ``mode`` within the owner's read and write bits
    (``0o600``, the agent's state file) is the one the temporary file is created with
    (:func:`create_temporary`; a umask never takes the owner's bits in practice), so no
    ``fchmod`` is spent on it; a wider one is set exactly."""
    fd, tmp, made_directory = _create(path, mode)
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
        if exclusive:
            try:
                os.link(tmp, path)
            finally:
                os.unlink(tmp)
        else:
            os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if not durable:
        return
    if directory is None:
        _fsync_directory(os.path.dirname(tmp))
    else:
        if made_directory:
            directory.close()  # the directory it had open was removed: open the new one
        directory.sync()


def create_temporary(path: Path, mode: int = 0o600) -> tuple[int, str]:
    """A new, empty file next to ``path`` that only this thread writes, open for writing:
    ``(fd, name)``. Named by process and thread (cheaper than :func:`tempfile.mkstemp`'s
    random names, as safe: created with ``O_EXCL | O_NOFOLLOW``, so never an existing
    file or a link); a thread makes its name for a path once and keeps it (a forked
    child makes its own). A leftover of a dead process that had the same pid is removed
    first; the directory is made on first use. Created with ``mode & 0o600`` (less the
    umask)."""
    fd, tmp, _ = _create(path, mode)
    return fd, tmp


def _create(path: Path, mode: int) -> tuple[int, str, bool]:
    """:func:`create_temporary`, and whether it had to make the directory."""
    names = _names.names
    try:
        directory, tmp = names[path]
    except KeyError:
        if len(names) >= _NAMES_KEPT:
            names.clear()
        directory, name = os.path.split(path)
        tmp = os.path.join(directory, f".{name}.{os.getpid()}-{threading.get_ident()}.tmp")
        names[path] = directory, tmp
    made_directory = False
    for _ in range(3):
        try:
            return os.open(tmp, _CREATE_FLAGS, mode & 0o600), tmp, made_directory
        except FileNotFoundError:
            Path(directory).mkdir(parents=True, exist_ok=True)
            made_directory = True
        except FileExistsError:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
    return os.open(tmp, _CREATE_FLAGS, mode & 0o600), tmp, made_directory


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
