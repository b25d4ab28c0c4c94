"""``node.cpu_hog`` and ``node.memory_hog``: a real resource hog, bounded in a cgroup.

The hog runs ``stress-ng`` when the host has it (else a small Python loop) and is
started *inside* its cgroup: a shell writes its own pid into the group's
``cgroup.procs`` and then ``exec``\\ s the hog, so no worker ever runs unbounded. The
group's CPU quota (percent of one CPU) and memory limit are the bound; the hog stops by
itself after ``duration_s``; revert kills it and removes the group.
"""

import contextlib
import shlex
import shutil
import subprocess
import sys
from typing import Any

from gameday.contract.backend import FaultRequest
from gameday.errors import FaultRejected
from gameday.kinds.node import (
    NODE_CPU_HOG,
    NODE_MEMORY_HOG,
    CpuHogParams,
    MemoryHogParams,
)
from gameday.node.cgroups import BoundedGroup, CgroupError, Hierarchies, detect, group_prefix

__all__ = ["HOG_KINDS", "HogFault", "hog_argv", "hog_group"]

HOG_KINDS = ("node.cpu_hog", "node.memory_hog")
MIB = 1024 * 1024

_PY_CPU = "import time\nend=time.monotonic()+{d}\nwhile time.monotonic()<end: pass\n"
_PY_MEMORY = ("import mmap,time\nm=mmap.mmap(-1,{b})\n"
              "for i in range(0,{b},4096): m[i]=1\ntime.sleep({d})\n")


def hog_argv(params: CpuHogParams | MemoryHogParams, *, stress_ng: str | None) -> list[str]:
    """The hog's command line (stress-ng when given its path, else Python)."""
    duration = max(1, round(params.duration_s))
    if isinstance(params, CpuHogParams):
        if stress_ng:
            return [stress_ng, "--cpu", str(params.workers), "--timeout", f"{duration}s",
                    "--quiet"]
        return [sys.executable, "-c", _PY_CPU.format(d=duration)]
    size = params.memory_mib * MIB
    if stress_ng:
        return [stress_ng, "--vm", "1", "--vm-bytes", f"{size // MIB}M", "--vm-keep",
                "--vm-hang", "0", "--timeout", f"{duration}s", "--quiet"]
    return [sys.executable, "-c", _PY_MEMORY.format(b=size, d=duration)]


def hog_group(kind: str, fault_id: str, *, scope: str = "",
              hierarchies: Hierarchies | None = None) -> BoundedGroup:
    """The cgroup of one hog fault: ``PREFIX[-SCOPE]-cpuhog-ID`` (derived from the fault
    id, so a restarted agent finds it again to revert it)."""
    short = "cpuhog" if kind == "node.cpu_hog" else "memhog"
    hierarchies = hierarchies or detect()
    wanted = ("cpu", "cpuacct") if kind == "node.cpu_hog" else ("memory",)
    controllers = tuple(c for c in wanted
                        if c != "cpuacct" or hierarchies.version("cpuacct") is not None)
    name = "-".join(part for part in (group_prefix(), scope, short, fault_id) if part)
    return BoundedGroup(name, controllers, hierarchies)


class HogFault:
    """One hog kind, its parameters parsed by the kind's declaration
    (:class:`gameday.kinds.node.CpuHogParams`, :class:`~gameday.kinds.node.MemoryHogParams`)."""

    injected_at = "process"

    def __init__(self, kind: str, *, scope: str = "", stress_ng: str | None = None,
                 use_stress_ng: bool = True) -> None:
        if kind not in HOG_KINDS:
            raise ValueError(f"not a hog kind: {kind}")
        self.kind = kind
        self.scope = scope
        self.stress_ng = stress_ng or (shutil.which("stress-ng") if use_stress_ng else None)
        self._procs: dict[str, subprocess.Popen[bytes]] = {}

    def unavailable(self) -> str | None:
        try:
            hog_group(self.kind, "probe", scope=self.scope)
        except CgroupError as exc:
            return str(exc)
        return None

    def apply(self, fault_id: str, request: FaultRequest) -> dict[str, Any]:
        params = (NODE_CPU_HOG if self.kind == NODE_CPU_HOG.name else
                  NODE_MEMORY_HOG).backend_params(request.params)
        try:
            group = hog_group(self.kind, fault_id, scope=self.scope)
            if isinstance(params, CpuHogParams):
                group.create(cpu_percent=params.cpu_percent)
            else:
                group.create(memory_bytes=params.limit * MIB)
        except CgroupError as exc:
            with contextlib.suppress(CgroupError):
                hog_group(self.kind, fault_id, scope=self.scope).remove()
            raise FaultRejected(f"{self.kind}: {exc}") from None
        argv = hog_argv(params, stress_ng=self.stress_ng)
        enter = "".join(f"echo $$ > {shlex.quote(str(f))} && " for f in group.procs_files())
        self._procs[fault_id] = subprocess.Popen(
            ["/bin/sh", "-c", enter + "exec " + shlex.join(argv)], stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, close_fds=True)
        memory_limit = group.memory_limit()
        return {"cgroup": group.name, "cgroup_paths": [str(p) for p in group.paths()],
                "hog": argv[0].rsplit("/", 1)[-1], "pid": self._procs[fault_id].pid,
                "bound": {"cpu_percent": params.cpu_percent
                          if isinstance(params, CpuHogParams) else None,
                          "memory_limit_mib": memory_limit // MIB if memory_limit else None}}

    def revert(self, fault_id: str, request: FaultRequest) -> None:
        group = hog_group(self.kind, fault_id, scope=self.scope)
        try:
            group.remove()
        except CgroupError as exc:
            raise FaultRejected(f"{self.kind}: {exc}") from None
        proc = self._procs.pop(fault_id, None)
        if proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)  # reap the hog's shell, now killed with its group
