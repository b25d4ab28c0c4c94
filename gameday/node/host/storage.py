"""Real storage faults on a host: the fault filesystem layered over a path, or a cgroup
freezer.

``storage.stall`` / ``storage.errors`` / ``storage.slow`` with target ``{"path": DIR}``
(or ``{"mount": DIR}``) become rules of a fault filesystem over ``DIR``
(:mod:`gameday.node.host.fusefs`; injected at ``storage``). ``storage.stall`` with
``mechanism: freezer`` and target ``{"cgroup": DIR}`` (an existing cgroup) or
``{"pid": N}`` freezes the tasks instead (v1 ``freezer.state``, v2 ``cgroup.freeze``,
whichever the host has): what a process looks like when all its I/O stops.

The freezer asks the agent's policy (:meth:`FuseStorageFault.use_policy`) about what it
would really freeze: a pid is taken to its process (a thread's id to its thread group)
and must be one the policy allows; a cgroup must be one the policy's
``processes.cgroups`` allows, and every process in it (and below it) one the policy
allows and gameday may signal (:func:`gameday.node.processes.pin_processes`).
"""

import contextlib
import errno
import os
import shutil
import stat
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Protocol

from gameday.contract.backend import FaultRequest
from gameday.errors import FaultRejected, PolicyRefused
from gameday.kinds.storage import STORAGE_STALL
from gameday.node.cgroups import BoundedGroup, CgroupError, detect, group_prefix
from gameday.node.faultfs.control import ControlError
from gameday.node.faultfs.mount import mount_table
from gameday.node.faultfs.rules import Rule, RuleError, rule_for_fault
from gameday.node.host.base import HostFault
from gameday.node.host.fusefs import FaultFsLayers
from gameday.node.processes import (
    NO_ALLOWED_MATCH,
    ProcessGuard,
    command_line,
    pin_processes,
    release,
)


class FreezerPolicy(Protocol):
    """What the freezer asks of the agent's policy (:class:`gameday.agent.policy.Policy`
    is one): a guard asked about each process, and a check of a cgroup directory and
    every process in it (raising :class:`gameday.errors.PolicyRefused`)."""

    def process_guard(self, pid: int) -> str | None: ...

    def check_cgroup_dir(self, real: str, pids: Iterable[int],
                         guard: Callable[[int], str | None]) -> None: ...


__all__ = ["FuseStorageFault", "checked_dir", "handlers"]

STORAGE_KINDS = ("storage.stall", "storage.errors", "storage.slow")
_REAL_FS = ("ext2", "ext3", "ext4", "xfs", "btrfs", "zfs", "nfs", "nfs4", "cifs", "overlay",
            "tmpfs", "fuse.faultfs", "lustre", "gpfs", "ceph", "fuse.juicefs", "fuse.s3fs")


def _fuse_unavailable() -> str | None:
    if not Path("/dev/fuse").exists():
        return "no /dev/fuse on this host"
    if not (shutil.which("fusermount3") or shutil.which("fusermount")):
        return "fusermount3 is not installed (Debian package fuse3)"
    if os.geteuid() != 0:
        return "layering a path needs root (bind mounts)"
    try:
        import mfusepy  # noqa: F401
    except (ImportError, OSError) as exc:
        return f"mfusepy cannot load libfuse: {exc}"
    return None


class FuseStorageFault:
    """One storage kind on a host (``storage.stall`` also by cgroup freezer)."""

    injected_at = "storage"

    def __init__(self, kind: str, layers: FaultFsLayers) -> None:
        self.kind = kind
        self.layers = layers
        self._frozen: dict[str, tuple[BoundedGroup | Path, int | None, str | None]] = {}
        self.policy: FreezerPolicy | None = None

    def use_policy(self, policy: FreezerPolicy) -> None:
        """Ask ``policy`` about every process and cgroup the freezer would freeze."""
        self.policy = policy

    def _guard(self) -> ProcessGuard | None:
        return self.policy.process_guard if self.policy is not None else None

    def unavailable(self) -> str | None:
        return _fuse_unavailable()

    def _freezer(self, request: FaultRequest) -> bool:
        """Whether ``request`` stalls by the cgroup freezer (``storage.stall``'s
        ``mechanism``, as its declaration parses it), not the fault filesystem."""
        return self.kind == STORAGE_STALL.name and \
            STORAGE_STALL.backend_params(request.params).mechanism == "freezer"

    def _checked(self, request: FaultRequest) -> tuple[Path, Rule]:
        """The directory to layer and the rule of ``request`` (FUSE), checked;
        :class:`FaultRejected` otherwise. Changes nothing."""
        unknown = sorted(set(request.target) - {"path", "mount"})
        if unknown:
            raise FaultRejected(f"target.{unknown[0]} is unknown (known: path, mount)")
        path = checked_dir(request.target.get("path") or request.target.get("mount"))
        try:
            return path, rule_for_fault(self.kind, request.params)
        except RuleError as exc:
            raise FaultRejected(str(exc)) from None

    def check(self, request: FaultRequest) -> dict[str, Any]:
        """The directory :meth:`apply` would layer (resolved), read-only; for the
        freezer, the cgroup or process it would freeze."""
        if not self._freezer(request):
            return {"paths": [str(self._checked(request)[0])]}
        try:
            cgroup, pid = self._freeze_target(request)
        except CgroupError as exc:
            raise FaultRejected(f"storage.stall (freezer): {exc}") from None
        if cgroup is not None:
            return {"cgroups": [cgroup]}
        return {"processes": [{"pid": pid, "command": " ".join(command_line(pid or 0))}]}

    def apply(self, fault_id: str, request: FaultRequest) -> dict[str, Any]:
        if self._freezer(request):
            return self._freeze(fault_id, request)
        path, rule = self._checked(request)
        client = self.layers.acquire(Path(path), fault_id)
        try:
            client.set_rule(fault_id, rule)
        except ControlError as exc:
            self.layers.release(Path(path), fault_id)
            raise FaultRejected(str(exc)) from None
        return {"path": path, "mechanism": "fuse", "rule": rule.to_json()}

    def revert(self, fault_id: str, request: FaultRequest) -> None:
        if self._freezer(request):
            self._thaw(fault_id, request)
            return
        path = request.target.get("path") or request.target.get("mount")
        if not isinstance(path, str):
            return
        with contextlib.suppress(ControlError):
            self.layers.client(Path(path)).clear(fault_id)
        self.layers.release(Path(path), fault_id)

    # -- freezer ------------------------------------------------------------------------
    def _freeze_target(self, request: FaultRequest) -> tuple[str | None, int | None]:
        """The cgroup (its real path) or the pid the freezer would freeze, checked;
        :class:`FaultRejected` otherwise. Changes nothing."""
        if self.kind != "storage.stall":
            raise FaultRejected("params.mechanism: freezer applies to storage.stall only")
        cgroup, pid = request.target.get("cgroup"), request.target.get("pid")
        unknown = sorted(set(request.target) - {"cgroup", "pid"})
        if unknown or (cgroup is None) == (pid is None):
            raise FaultRejected("target: freezer needs exactly one of {cgroup: DIR} or "
                                "{pid: N > 1}")
        if cgroup is not None:
            real = str(checked_dir(cgroup, field="target.cgroup"))
            if not real.startswith("/sys/fs/cgroup/"):
                raise FaultRejected(f"target.cgroup {real} is not under /sys/fs/cgroup")
            if _holds_agent(Path(real)):
                raise FaultRejected(f"target.cgroup {real} holds this agent; "
                                    f"freezing it would freeze the agent")
            pids = _cgroup_pids(Path(real))
            if self.policy is not None:
                self.policy.check_cgroup_dir(real, pids, self.policy.process_guard)
            release(pin_processes(pids, None, f"target.cgroup {real}"))  # protected, denied
            return real, None
        if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 1:
            raise FaultRejected("target: freezer needs {cgroup: DIR} or {pid: N > 1}")
        where = f"target {{pid: {pid}}}"
        pinned = pin_processes([pid], self._guard(), where)
        release(pinned)
        if not pinned:
            if self.policy is None:
                raise FaultRejected(f"{where} matches no process")
            raise PolicyRefused(f"{where} {NO_ALLOWED_MATCH}")
        return None, pinned[0].ref.pid

    def _freeze(self, fault_id: str, request: FaultRequest) -> dict[str, Any]:
        try:
            cgroup, pid = self._freeze_target(request)
            if cgroup is not None:
                _set_frozen(Path(cgroup), True)
                self._frozen[fault_id] = (Path(cgroup), None, None)
                return {"mechanism": "freezer", "cgroup": cgroup}
            assert pid is not None
            group = BoundedGroup(f"{group_prefix()}-freeze-{fault_id}", ("freezer",), detect())
            group.create()
            origin = _freezer_cgroup_of(pid, group)
            group.add(pid)
            _set_frozen(group.dirs["freezer"], True)
        except CgroupError as exc:
            raise FaultRejected(f"storage.stall (freezer): {exc}") from None
        self._frozen[fault_id] = (group, pid, origin)
        return {"mechanism": "freezer", "cgroup": group.name, "pid": pid}

    def _thaw(self, fault_id: str, request: FaultRequest) -> None:
        held = self._frozen.pop(fault_id, None)
        if held is None:
            cgroup = request.target.get("cgroup")
            if isinstance(cgroup, str):
                held = (Path(cgroup), None, None)
            else:
                held = (BoundedGroup(f"{group_prefix()}-freeze-{fault_id}", ("freezer",),
                                     detect()), request.target.get("pid"), None)
        where, pid, origin = held
        with contextlib.suppress(CgroupError, OSError):
            if isinstance(where, Path):
                _set_frozen(where, False)
                return
            if not where.exists():
                return
            _set_frozen(where.dirs["freezer"], False)
            if isinstance(pid, int) and origin is not None:
                with contextlib.suppress(OSError):
                    (Path(origin) / "cgroup.procs").write_text(str(pid))
            elif isinstance(pid, int):
                root = where.dirs["freezer"].parent
                with contextlib.suppress(OSError):
                    (root / "cgroup.procs").write_text(str(pid))
            where.remove()

    def inventory(self) -> dict[str, list[dict[str, Any]]]:
        mounts = self.layers.layered()
        seen = {m["path"] for m in mounts}
        for mountpoint, fstype, source in mount_table():
            if fstype in _REAL_FS and mountpoint not in seen:
                mounts.append({"name": mountpoint, "path": mountpoint, "fstype": fstype,
                               "source": source, "faultable": mountpoint != "/"})
        return {"mounts": mounts}


def checked_dir(value: object, *, field: str = "target.path") -> Path:
    """``value`` as an absolute directory named without ``..``, ``.`` or a symlink
    anywhere along it (what is named is what would be layered), else
    :class:`FaultRejected`. Resolved component by component, each opened with
    ``O_NOFOLLOW`` relative to the one before (openat-style), and the directory opened so
    checked to be the one the path names now: a symlink swapped in at any component
    between the checks is refused."""
    if not isinstance(value, str) or not value.startswith("/") or "\0" in value:
        raise FaultRejected(f"{field}: needs an absolute directory, got {value!r}")
    parts = value.split("/")
    if ".." in parts or "." in parts:
        raise FaultRejected(f"{field} {value!r}: no '.' or '..' components")
    real = os.path.normpath(value)
    try:
        fd = _open_nofollow(real)
    except NotADirectoryError:
        raise FaultRejected(f"{field} {value!r} is not a directory") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise FaultRejected(f"{field} {value!r} goes through a symlink (to "
                                f"{os.path.realpath(value)}); name the real directory") from None
        raise FaultRejected(f"{field} {value!r} is not a directory "
                            f"({exc.strerror or exc})") from None
    try:
        opened, named = os.fstat(fd), os.stat(real, follow_symlinks=False)
    except OSError:
        raise FaultRejected(f"{field} {value!r} changed while it was checked") from None
    finally:
        os.close(fd)
    if (opened.st_dev, opened.st_ino) != (named.st_dev, named.st_ino) \
            or not stat.S_ISDIR(named.st_mode):
        raise FaultRejected(f"{field} {value!r} changed while it was checked")
    return Path(real)


def _open_nofollow(path: str) -> int:
    """An ``O_PATH`` descriptor of the directory ``path`` (absolute, normalised), every
    component opened with ``O_NOFOLLOW | O_DIRECTORY`` relative to its parent's."""
    flags = os.O_PATH | os.O_NOFOLLOW | os.O_DIRECTORY | os.O_CLOEXEC
    fd = os.open("/", flags)
    try:
        for part in [p for p in path.split("/") if p]:
            try:
                child = os.open(part, flags, dir_fd=fd)
            except OSError as exc:
                if exc.errno == errno.ENOTDIR and os.path.islink(
                        os.path.join(f"/proc/self/fd/{fd}", part)):
                    raise OSError(errno.ELOOP, "a symlink") from None
                raise
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


def _cgroup_pids(cgroup: Path) -> list[int]:
    """Every process in ``cgroup`` and the cgroups below it (``cgroup.procs``, else v1
    ``tasks``: thread ids, which the checks take to their processes)."""
    pids: list[int] = []
    for directory, _, files in os.walk(cgroup):
        for name in ("cgroup.procs", "tasks"):
            if name in files:
                with contextlib.suppress(OSError, ValueError):
                    pids.extend(int(word) for word in
                                (Path(directory) / name).read_text().split())
                break
    return list(dict.fromkeys(pids))


def _holds_agent(cgroup: Path) -> bool:
    """Whether this agent's process is in ``cgroup`` or any cgroup below it."""
    me = str(os.getpid())
    for directory, _, files in os.walk(cgroup):
        for name in ("cgroup.procs", "tasks"):
            if name in files:
                with contextlib.suppress(OSError):
                    if me in (Path(directory) / name).read_text().split():
                        return True
    return False


def _set_frozen(cgroup: Path, frozen: bool) -> None:
    if (cgroup / "freezer.state").exists():
        (cgroup / "freezer.state").write_text("FROZEN" if frozen else "THAWED")
    elif (cgroup / "cgroup.freeze").exists():
        (cgroup / "cgroup.freeze").write_text("1" if frozen else "0")
    else:
        raise CgroupError(f"{cgroup} is not a cgroup that can be frozen")


def _freezer_cgroup_of(pid: int, group: BoundedGroup) -> str | None:
    """The freezer cgroup directory ``pid`` is in now (to put it back on revert)."""
    root = group.dirs["freezer"].parent
    v1 = "freezer" in group.hierarchies.v1
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, relative = line.split(":", 2)
        if (v1 and "freezer" in controllers.split(",")) or (not v1 and controllers == ""):
            return str(root / relative.lstrip("/"))
    return None


def handlers() -> list[HostFault]:
    layers = FaultFsLayers()
    return [FuseStorageFault(kind, layers) for kind in STORAGE_KINDS]
