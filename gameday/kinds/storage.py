"""Storage fault kinds: a stalled, failing or slow filesystem.

Each is a rule of the fault filesystem (``gameday.node.faultfs``), a FUSE passthrough
layered over a path; in the lab it serves the weight and checkpoint store.
"""

from dataclasses import dataclass
from typing import Literal

from gameday.contract.faultfs import ERRNOS, OPERATION_GROUPS, OPERATIONS
from gameday.errors import InvalidInput
from gameday.kinds.params import param, required
from gameday.kinds.selectors import Selector, SelectorKey
from gameday.kinds.spec import KindParams, KindSpec

__all__ = [
    "KINDS",
    "STORAGE_ERRORS",
    "STORAGE_SELECTOR",
    "STORAGE_SLOW",
    "STORAGE_STALL",
    "ErrorsParams",
    "SlowParams",
    "StallParams",
]

STORAGE_SELECTOR = Selector(
    argument="storage",
    doc="which filesystem: {mount: store} (a mount the agent lists; the lab's weight "
        "store) | {path: /abs/dir, node: NAME} (host: layered over that directory) | "
        "{pid: N} or {cgroup: DIR} (host, stall with mechanism freezer)",
    keys=(SelectorKey("mount", (str,), "a mount the agent lists"),
          SelectorKey("path", (str,), "host: the directory the fault filesystem covers"),
          SelectorKey("pid", (int,), "host: freeze this process's cgroup (freezer)"),
          SelectorKey("cgroup", (str,), "host: freeze this cgroup (freezer)"),
          SelectorKey("node", (str,), "the node")))


def _operation(name: str, path: str) -> None:
    if name not in OPERATIONS and name not in OPERATION_GROUPS:
        raise InvalidInput(f"unknown operation {name[:60]!r} (known: "
                           f"{', '.join((*OPERATION_GROUPS, *OPERATIONS))})", path=path)


_OPS_DOC = ("the operations it hits: names (read, write, open, create, fsync, getattr, "
            "readdir, ...) or groups (all, data, metadata)")
_WITHIN_DOC = "only this file or directory of the mount (relative, starting with /)"
_DURATION_DOC = ("how long it acts before it clears by itself (null: until reverted or its "
                 "lease lapses)")


@dataclass(frozen=True, kw_only=True)
class StallParams(KindParams):
    """``storage.stall``'s parameters."""

    ops: tuple[str, ...] = param(_OPS_DOC, default=("all",), items=_operation)
    within: str = param(_WITHIN_DOC, default="/")
    duration_s: float | None = param(_DURATION_DOC, default=None, minimum=0.05,
                                     maximum=86400.0)
    mechanism: Literal["fuse", "freezer"] = param(
        "host: fuse (the fault filesystem over storage.path) or freezer (freeze "
        "storage.cgroup or storage.pid: all its tasks stop, as when every I/O hangs)",
        default="fuse")


@dataclass(frozen=True, kw_only=True)
class ErrorsParams(KindParams):
    """``storage.errors``'s parameters."""

    errno: str = param("the error returned", default="EIO", choices=tuple(ERRNOS))
    percent: float = param("percent of the selected operations that fail", default=100.0,
                           minimum=0.01, maximum=100.0)
    ops: tuple[str, ...] = param(_OPS_DOC, default=("read", "write", "fsync"),
                                 items=_operation)
    within: str = param(_WITHIN_DOC, default="/")
    duration_s: float | None = param(_DURATION_DOC, default=None, minimum=0.05,
                                     maximum=86400.0)


@dataclass(frozen=True, kw_only=True)
class SlowParams(KindParams):
    """``storage.slow``'s parameters."""

    latency_ms: float = required("added to each selected operation", minimum=0.1,
                                 maximum=600_000.0)
    jitter_ms: float = param("plus a uniform random 0..jitter_ms", default=0.0, minimum=0.0,
                             maximum=600_000.0)
    ops: tuple[str, ...] = param(_OPS_DOC, default=("all",), items=_operation)
    within: str = param(_WITHIN_DOC, default="/")
    duration_s: float | None = param(_DURATION_DOC, default=None, minimum=0.05,
                                     maximum=86400.0)


STORAGE_STALL = KindSpec(
    name="storage.stall",
    summary="the filesystem hangs: every selected operation blocks until the fault is "
            "reverted (or clears), then proceeds as if nothing happened",
    module="faults.storage",
    func="stall",
    coverage_layer="storage",
    family="Storage stall",
    injected_at={"lab": "storage", "host": "storage"},
    selects=STORAGE_SELECTOR,
    params_type=StallParams,
    seen_through="processes blocked in the filesystem (state D/S in FUSE), a restarted "
                 "shard that cannot load its weights, checkpoints that stop landing",
    tags=("storage", "stall", "hang", "fuse"),
)

STORAGE_ERRORS = KindSpec(
    name="storage.errors",
    summary="the filesystem fails: a percentage of the selected operations return an "
            "error (EIO, ENOSPC, EACCES, EROFS, EDQUOT)",
    module="faults.storage",
    func="errors",
    coverage_layer="storage",
    family="Storage I/O errors",
    injected_at={"lab": "storage", "host": "storage"},
    selects=STORAGE_SELECTOR,
    params_type=ErrorsParams,
    seen_through="I/O errors in the application (weights fail to load: the shard exits), "
                 "failed checkpoints",
    tags=("storage", "errors", "eio", "enospc", "fuse"),
)

STORAGE_SLOW = KindSpec(
    name="storage.slow",
    summary="the filesystem is slow: each selected operation is delayed",
    module="faults.storage",
    func="slow",
    coverage_layer="storage",
    family="Slow storage",
    injected_at={"lab": "storage", "host": "storage"},
    selects=STORAGE_SELECTOR,
    params_type=SlowParams,
    seen_through="slower weight loads and checkpoints, longer restarts",
    tags=("storage", "latency", "slow", "fuse"),
)

KINDS: tuple[KindSpec[KindParams], ...] = (STORAGE_STALL, STORAGE_ERRORS, STORAGE_SLOW)
