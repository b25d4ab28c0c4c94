"""Mounting and unmounting fault filesystems, and finding them in the mount table.

:class:`FaultFsMount` starts ``python -m gameday.node.faultfs`` over a backing directory,
waits until the mount answers, and stops it: first every fault is cleared (hung
operations proceed), then the process is asked to unmount and exit, and whatever is
left is unmounted lazily (``fusermount3 -uz``), so nothing stays mounted.
"""

import contextlib
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from gameday.node.faultfs.control import ControlError, FaultFsClient

__all__ = ["FSNAME", "FaultFsMount", "control_socket", "fuse_mounts", "is_mounted",
           "mount_table", "unmount"]

#: The filesystem name every fault filesystem mounts with (``mount`` shows it).
FSNAME = "gameday-faultfs"
_SUN_PATH_MAX = 100


def _unescape(field: str) -> str:
    """Undo the mount table's octal escapes (``\\040`` is a space)."""
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and field[i + 1:i + 4].isdigit():
            out.append(chr(int(field[i + 1:i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def mount_table() -> list[tuple[str, str, str]]:
    """``(mountpoint, fstype, source)`` for every mount this process sees."""
    rows: list[tuple[str, str, str]] = []
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return rows
    for line in lines:
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) >= 5 and len(tail) >= 2:
            rows.append((_unescape(fields[4]), tail[0], _unescape(tail[1])))
    return rows


def fuse_mounts(under: Path | None = None) -> list[Path]:
    """Every FUSE mount (any fuse filesystem) at or below ``under`` (all when None)."""
    found = []
    root = str(under.absolute()) if under is not None else None
    for mountpoint, fstype, _ in mount_table():
        if not fstype.startswith("fuse"):
            continue
        if root is None or mountpoint == root or mountpoint.startswith(root.rstrip("/") + "/"):
            found.append(Path(mountpoint))
    return found


def is_mounted(path: Path) -> bool:
    """Whether something is mounted exactly at ``path``."""
    target = str(path.absolute())
    return any(mountpoint == target for mountpoint, _, _ in mount_table())


def unmount(path: Path, *, lazy: bool = True) -> bool:
    """Unmount ``path`` (``fusermount3 -u``; with ``lazy``, then ``-uz``, then
    ``umount -l``); True when nothing is mounted there any more."""
    attempts: list[list[str]] = []
    fusermount = shutil.which("fusermount3") or shutil.which("fusermount")
    if fusermount:
        attempts.append([fusermount, "-u", str(path)])
        if lazy:
            attempts.append([fusermount, "-uz", str(path)])
    umount = shutil.which("umount")
    if lazy and umount:
        attempts.append([umount, "-l", str(path)])
    for argv in attempts:
        if not is_mounted(path):
            return True
        subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, check=False, timeout=10)
    return not is_mounted(path)


def control_socket(preferred: Path) -> Path:
    """``preferred`` when a unix socket can have that path, else a short path in the
    temporary directory derived from it."""
    if len(str(preferred)) <= _SUN_PATH_MAX:
        return preferred
    digest = hashlib.sha256(str(preferred).encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"{FSNAME}-{digest}.sock"


class FaultFsMount:
    """One fault filesystem process mounted at ``mountpoint`` over ``backing``."""

    def __init__(self, backing: Path, mountpoint: Path, socket_path: Path, *,
                 log_path: Path | None = None) -> None:
        self.backing = backing.absolute()
        self.mountpoint = mountpoint.absolute()
        self.socket_path = control_socket(socket_path.absolute())
        self.log_path = log_path
        self.client = FaultFsClient(self.socket_path)
        self.popen: subprocess.Popen[bytes] | None = None

    def argv(self) -> list[str]:
        return [sys.executable, "-m", "gameday.node.faultfs", "--backing", str(self.backing),
                "--mountpoint", str(self.mountpoint), "--control", str(self.socket_path)]

    def start(self, *, preexec: Callable[[], None] | None = None,
              env: dict[str, str] | None = None,
              new_session: bool = False) -> subprocess.Popen[bytes]:
        """Start the process (after lazily unmounting a stale mount left at the
        mountpoint); return it without waiting (see :meth:`wait_mounted`). With
        ``new_session`` it outlives its starter's process group (a host agent's mount)."""
        if is_mounted(self.mountpoint):
            unmount(self.mountpoint)
        self.backing.mkdir(parents=True, exist_ok=True)
        self.mountpoint.mkdir(parents=True, exist_ok=True)
        if self.log_path is not None:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path or os.devnull, "ab") as log:
            self.popen = subprocess.Popen(self.argv(), stdin=subprocess.DEVNULL, stdout=log,
                                          stderr=subprocess.STDOUT, close_fds=True,
                                          preexec_fn=preexec, env=env,
                                          start_new_session=new_session)
        return self.popen

    def ready(self) -> bool:
        """Mounted and answering on its control socket."""
        return is_mounted(self.mountpoint) and self.client.alive()

    def wait_mounted(self, timeout_s: float = 10.0) -> None:
        """Wait until :meth:`ready`; raise ``ControlError`` (one line) if it does not come."""
        deadline = time.monotonic() + timeout_s
        while not self.ready():
            if self.popen is not None and self.popen.poll() is not None:
                raise ControlError(f"the fault filesystem for {self.mountpoint} exited with "
                                   f"code {self.popen.returncode} (log: {self.log_path})")
            if time.monotonic() > deadline:
                raise ControlError(f"the fault filesystem for {self.mountpoint} was not "
                                   f"mounted within {timeout_s:g}s (log: {self.log_path})")
            time.sleep(0.02)

    def stop(self, timeout_s: float = 5.0) -> None:
        """Release every fault, unmount, and stop the process; leave nothing mounted.

        The unmount is lazy when files are open: the process keeps serving them (an
        operation a fault held completes) until they are closed or ``timeout_s`` passed;
        then it is sent SIGTERM, and SIGKILL if it does not go.
        """
        with contextlib.suppress(ControlError):
            self.client.clear_all()
        unmount(self.mountpoint)
        popen = self.popen
        if popen is not None and popen.poll() is None:
            try:
                popen.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                popen.send_signal(signal.SIGTERM)
                try:
                    popen.wait(timeout=2.0)
                except subprocess.TimeoutExpired:
                    popen.kill()
                    popen.wait()
        self.socket_path.unlink(missing_ok=True)
