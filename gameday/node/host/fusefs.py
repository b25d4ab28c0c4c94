"""Layering the fault filesystem over a directory of a real host.

:class:`FaultFsLayers` puts a :mod:`gameday.node.faultfs` mount over ``PATH`` for as long as
some fault needs it: the original directory is bind-mounted to a private backing
directory, the fault filesystem is mounted on ``PATH`` over it, and every new open under
``PATH`` goes through it (files opened before keep bypassing it). When the last fault
on ``PATH`` is reverted, the faults are cleared (hung operations proceed), the fault
filesystem is unmounted and the bind removed. The filesystem process lives in its own
session, so it outlives an agent restart; the state (``$GAMEDAY_FAULTFS_DIR``, default
``/run/gameday/faultfs``) lets a restarted agent find it and undo it.
"""

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import threading
from pathlib import Path
from typing import Any

from gameday.atomic import replace_file
from gameday.errors import FaultRejected
from gameday.node.faultfs.control import ControlError, FaultFsClient
from gameday.node.faultfs.mount import FaultFsMount, is_mounted, unmount

__all__ = ["FaultFsLayers", "state_root"]

STATE_ENV = "GAMEDAY_FAULTFS_DIR"


def state_root() -> Path:
    return Path(os.environ.get(STATE_ENV) or "/run/gameday/faultfs")


class FaultFsLayers:
    """The fault filesystems this agent layered, by path."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = root or state_root()
        self._lock = threading.Lock()

    def _dir(self, path: Path) -> Path:
        return self.root / hashlib.sha256(str(path).encode()).hexdigest()[:16]

    def _mount(self, path: Path) -> FaultFsMount:
        state = self._dir(path)
        return FaultFsMount(state / "backing", path, state / "control.sock",
                            log_path=state / "faultfs.log")

    def _meta(self, path: Path) -> dict[str, Any]:
        with contextlib.suppress(OSError, ValueError):
            data = json.loads((self._dir(path) / "meta.json").read_text())
            if isinstance(data, dict):
                return data
        return {"path": str(path), "faults": []}

    def _save(self, path: Path, meta: dict[str, Any]) -> None:
        replace_file(self._dir(path) / "meta.json", json.dumps(meta).encode())

    def client(self, path: Path) -> FaultFsClient:
        return self._mount(path).client

    def acquire(self, path: Path, fault_id: str) -> FaultFsClient:
        """The control client of the fault filesystem over ``path``, layering it first if
        no fault holds it yet. Raises FaultRejected (one line) when it cannot."""
        path = Path(os.path.abspath(path))
        if str(path) == "/" or not path.is_dir():
            raise FaultRejected(f"target.path: {path} is not a directory that can be layered")
        with self._lock:
            meta = self._meta(path)
            fs = self._mount(path)
            if not meta["faults"] or not fs.ready():
                self._layer(path, fs)
            meta["faults"] = sorted(set(meta["faults"]) | {fault_id})
            self._save(path, meta)
            return fs.client

    def _layer(self, path: Path, fs: FaultFsMount) -> None:
        state = self._dir(path)
        backing = state / "backing"
        backing.mkdir(parents=True, exist_ok=True)
        if not is_mounted(backing):
            done = subprocess.run(["mount", "--bind", str(path), str(backing)],
                                  capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise FaultRejected(f"cannot bind {path} to {backing}: "
                                    f"{done.stderr.strip() or done.returncode}")
        try:
            fs.start(new_session=True)
            fs.wait_mounted()
        except ControlError as exc:
            self._teardown(path, fs)
            raise FaultRejected(str(exc)) from None

    def release(self, path: Path, fault_id: str) -> None:
        """Forget ``fault_id``; when no fault holds ``path`` any more, remove the layer."""
        path = Path(os.path.abspath(path))
        with self._lock:
            meta = self._meta(path)
            meta["faults"] = [f for f in meta["faults"] if f != fault_id]
            if meta["faults"]:
                self._save(path, meta)
                return
            self._teardown(path, self._mount(path))

    def _teardown(self, path: Path, fs: FaultFsMount) -> None:
        fs.stop()
        state = self._dir(path)
        backing = state / "backing"
        if is_mounted(backing):
            unmount(backing)
        if not is_mounted(path) and not is_mounted(backing):
            shutil.rmtree(state, ignore_errors=True)

    def layered(self) -> list[dict[str, Any]]:
        """The layers this agent holds now (for the inventory)."""
        found = []
        if self.root.is_dir():
            for state in sorted(self.root.iterdir()):
                with contextlib.suppress(OSError, ValueError):
                    meta = json.loads((state / "meta.json").read_text())
                    found.append({"name": meta["path"], "path": meta["path"],
                                  "fstype": "fuse.faultfs", "faultable": True,
                                  "faults": meta["faults"]})
        return found
