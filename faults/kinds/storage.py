"""Storage fault kinds: a stalled, failing or slow filesystem.

Each is a rule of the fault filesystem (:mod:`gameday.node.faultfs`), a FUSE passthrough
layered over a path; in the lab it serves the weight and checkpoint store.
"""

from dataclasses import dataclass
from typing import Any

from faults.base import FaultKind, Param
from gameday.contract.faultfs import ERRNOS, OPERATION_GROUPS, OPERATIONS
from gameday.errors import InvalidInput

STORAGE_SELECTOR_DOC = ("which filesystem: {mount: store} (a mount the agent lists; the "
                        "lab's weight store) | {path: /abs/dir, node: NAME} (host: layered "
                        "over that directory) | {pid: N} or {cgroup: DIR} (host, stall with "
                        "mechanism freezer)")


@dataclass(frozen=True)
class OperationsParam(Param):
    """A list of filesystem operation names or groups (``all``, ``data``, ``metadata``)."""

    def check(self, value: Any, path: str) -> Any:
        checked = super().check(value, path)
        if checked is None:
            return None
        if not checked:
            raise InvalidInput("select at least one operation", path=path)
        for index, name in enumerate(checked):
            if name not in OPERATIONS and name not in OPERATION_GROUPS:
                raise InvalidInput(f"unknown operation {name!r} (known: "
                                   f"{', '.join((*OPERATION_GROUPS, *OPERATIONS))})",
                                   path=f"{path}[{index}]")
        return list(checked)


def _ops(default: list[str]) -> OperationsParam:
    return OperationsParam("ops", list, "the operations it hits: names (read, write, open, "
                           "create, fsync, getattr, readdir, ...) or groups (all, data, "
                           "metadata)", default=default)


_WITHIN = Param("within", str, "only this file or directory of the mount (relative, "
                "starting with /)", default="/")
_DURATION = Param("duration_s", float, "how long it acts before it clears by itself "
                  "(null: until reverted or its lease lapses)", default=None, minimum=0.05,
                  maximum=86400.0, nullable=True)

STORAGE_STALL = FaultKind(
    name="storage.stall",
    summary="the filesystem hangs: every selected operation blocks until the fault is "
            "reverted (or clears), then proceeds as if nothing happened",
    module="faults.storage",
    func="stall",
    coverage_layer="storage",
    family="Storage stall",
    injected_at={"lab": "storage", "host": "storage"},
    selector="storage",
    params=(_ops(["all"]), _WITHIN, _DURATION,
            Param("mechanism", str, "host: fuse (the fault filesystem over storage.path) or "
                  "freezer (freeze storage.cgroup or storage.pid: all its tasks stop, as when "
                  "every I/O hangs)", default="fuse", choices=("fuse", "freezer"))),
    seen_through="processes blocked in the filesystem (state D/S in FUSE), a restarted "
                 "shard that cannot load its weights, checkpoints that stop landing",
    tags=("storage", "stall", "hang", "fuse"),
)

STORAGE_ERRORS = FaultKind(
    name="storage.errors",
    summary="the filesystem fails: a percentage of the selected operations return an "
            "error (EIO, ENOSPC, EACCES, EROFS, EDQUOT)",
    module="faults.storage",
    func="errors",
    coverage_layer="storage",
    family="Storage I/O errors",
    injected_at={"lab": "storage", "host": "storage"},
    selector="storage",
    params=(
        Param("errno", str, "the error returned", default="EIO", choices=tuple(ERRNOS)),
        Param("percent", float, "percent of the selected operations that fail", default=100.0,
              minimum=0.01, maximum=100.0),
        _ops(["read", "write", "fsync"]), _WITHIN, _DURATION,
    ),
    seen_through="I/O errors in the application (weights fail to load: the shard exits), "
                 "failed checkpoints",
    tags=("storage", "errors", "eio", "enospc", "fuse"),
)

STORAGE_SLOW = FaultKind(
    name="storage.slow",
    summary="the filesystem is slow: each selected operation is delayed",
    module="faults.storage",
    func="slow",
    coverage_layer="storage",
    family="Slow storage",
    injected_at={"lab": "storage", "host": "storage"},
    selector="storage",
    params=(
        Param("latency_ms", float, "added to each selected operation", required=True,
              minimum=0.1, maximum=600_000.0),
        Param("jitter_ms", float, "plus a uniform random 0..jitter_ms", default=0.0,
              minimum=0.0, maximum=600_000.0),
        _ops(["all"]), _WITHIN, _DURATION,
    ),
    seen_through="slower weight loads and checkpoints, longer restarts",
    tags=("storage", "latency", "slow", "fuse"),
)

KINDS: tuple[FaultKind, ...] = (STORAGE_STALL, STORAGE_ERRORS, STORAGE_SLOW)
