"""The lab's store on the fault filesystem, and the node handlers that fault it.

The weight store ``DIR/store`` (shard weights; the trainer's ``checkpoints/``) is a
mount of :mod:`gameday.node.faultfs` over ``DIR/store.backing``: the supervisor mounts it
before writing the weights and unmounts it when it stops; ``gameday lab down``
lazily unmounts whatever a killed lab left (:func:`unmount_leftovers`). Every node's
agent applies ``storage.stall``, ``storage.errors`` and ``storage.slow`` to it through
its control socket (:class:`StoreFault`), so a stalled store really hangs a shard that
(re)loads its weights, and errors really fail the load.
"""

import contextlib
from pathlib import Path
from typing import Any

from gameday.contract.backend import FaultRequest
from gameday.errors import FaultRejected
from gameday.lab.layout import LabPaths
from gameday.node.faultfs.control import ControlError, FaultFsClient
from gameday.node.faultfs.mount import FaultFsMount, control_socket, fuse_mounts, unmount
from gameday.node.faultfs.rules import RuleError, rule_for_fault

__all__ = ["STORAGE_KINDS", "StoreFault", "store_mount", "unmount_leftovers"]

STORAGE_KINDS = ("storage.stall", "storage.errors", "storage.slow")
STORE_NAME = "store"


def _backing(paths: LabPaths) -> Path:
    return paths.root / "store.backing"


def _socket(paths: LabPaths) -> Path:
    return control_socket(paths.root / "run" / "store.sock")


def store_mount(paths: LabPaths) -> FaultFsMount:
    """The fault filesystem that serves ``DIR/store`` from ``DIR/store.backing``."""
    return FaultFsMount(_backing(paths), paths.store, _socket(paths),
                        log_path=paths.log("store"))


def unmount_leftovers(root: Path) -> list[Path]:
    """Lazily unmount every FUSE mount at or below ``root``; return those still mounted."""
    return [m for m in sorted(fuse_mounts(root), reverse=True) if not unmount(m)]


class StoreFault:
    """One storage kind on the lab's store. Target ``{"mount": "store"}`` (or its path);
    parameters as the catalogue says (``ops``, ``path``, ``errno``, ``percent``,
    ``latency_ms``, ``jitter_ms``)."""

    injected_at = "storage"

    def __init__(self, kind: str, paths: LabPaths) -> None:
        self.kind = kind
        self.paths = paths
        self.client = FaultFsClient(_socket(paths), timeout_s=3.0)

    def _check_target(self, request: FaultRequest) -> None:
        wanted = request.target.get("mount") or request.target.get("path")
        if wanted not in (STORE_NAME, str(self.paths.store)):
            raise FaultRejected(f"target: the lab node has one faultable mount, "
                                f"{STORE_NAME!r} ({self.paths.store}); got {wanted!r}")

    def apply(self, fault_id: str, request: FaultRequest) -> dict[str, Any]:
        self._check_target(request)
        try:
            rule = rule_for_fault(self.kind, request.params)
            self.client.set_rule(fault_id, rule)
        except RuleError as exc:
            raise FaultRejected(str(exc)) from None
        except ControlError as exc:
            raise FaultRejected(str(exc)) from None
        return {"mount": str(self.paths.store), "rule": rule.to_json()}

    def revert(self, fault_id: str, request: FaultRequest) -> None:
        # when the filesystem is gone, nothing it held is held any more
        with contextlib.suppress(ControlError):
            self.client.clear(fault_id)

    def inventory(self) -> dict[str, list[dict[str, Any]]]:
        try:
            status = self.client.status()
        except ControlError as exc:
            return {"mounts": [{"name": STORE_NAME, "path": str(self.paths.store),
                                "faultable": False, "error": str(exc)}]}
        return {"mounts": [{"name": STORE_NAME, "path": status["mountpoint"],
                            "backing": status["backing"], "fstype": "fuse.faultfs",
                            "faultable": True, "faults": status["rules"],
                            "hung": status["hung"]}]}


def store_handlers(paths: LabPaths) -> list[StoreFault]:
    return [StoreFault(kind, paths) for kind in STORAGE_KINDS]
