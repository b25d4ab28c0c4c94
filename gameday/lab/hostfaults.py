"""The lab node's process and hog faults: real signals and real cgroup-bounded hogs.

``process.kill`` / ``process.pause`` take ``{"pid": N}`` and signal it only when it is
one of this lab's processes (its command line names the lab directory), never anything
else on the machine. ``node.cpu_hog`` / ``node.memory_hog`` run a real hog
(:mod:`gameday.node.hogs`) in a cgroup whose name carries :func:`lab_scope`, so
``gameday lab down`` removes what a killed lab left (:func:`remove_lab_cgroups`).
The lab's nodes share one machine: a node's hog competes with every shard for CPU,
within its quota.
"""

import hashlib
from collections.abc import Mapping
from typing import Any

from gameday.errors import FaultRejected
from gameday.lab.layout import LabPaths
from gameday.lab.proc import process_cmdline
from gameday.node.cgroups import group_prefix, remove_groups
from gameday.node.hogs import HOG_KINDS, HogFault
from gameday.node.processes import PROCESS_KINDS, Resolver, SignalFault

__all__ = ["hog_handlers", "lab_scope", "process_handlers", "remove_lab_cgroups"]


def lab_scope(paths: LabPaths) -> str:
    """A short mark of this lab (``lab`` + 8 hex digits of its directory)."""
    return "lab" + hashlib.sha256(str(paths.root.absolute()).encode()).hexdigest()[:8]


def remove_lab_cgroups(paths: LabPaths) -> list[str]:
    """Kill and remove every cgroup this lab's hogs made; one line per failure."""
    return remove_groups(f"{group_prefix()}-{lab_scope(paths)}-")


def _lab_pid_resolver(paths: LabPaths) -> Resolver:
    root = str(paths.root.absolute())

    def resolve(target: Mapping[str, Any], params: Mapping[str, Any]) -> list[int]:
        pid = target.get("pid")
        if not isinstance(pid, int) or isinstance(pid, bool):
            raise FaultRejected("target: the lab node needs {pid: N} (the engine resolves "
                                "{shard: N} and {role: NAME} to it)")
        if root not in process_cmdline(pid):
            raise FaultRejected(f"target: pid {pid} is not a process of the lab in {root}")
        return [pid]

    return resolve


def process_handlers(paths: LabPaths) -> list[SignalFault]:
    resolve = _lab_pid_resolver(paths)
    return [SignalFault(kind, resolve) for kind in PROCESS_KINDS]


def hog_handlers(paths: LabPaths) -> list[HogFault]:
    return [HogFault(kind, scope=lab_scope(paths)) for kind in HOG_KINDS]
