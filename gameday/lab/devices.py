"""The agent backend of a lab node: fault kinds change the state of virtual GPUs.

:class:`VirtualGpuBackend` implements :class:`gameday.contract.backend.Backend`. Each fault
kind is a small :class:`gameday.lab.vfaults.VirtualFault` that validates a request into
a change of one GPU's state. Reverting restores the fields the fault changed to their
values from before it (the "GPU was reset"); those values are kept as fault records.
Every change is published for the shards (:mod:`gameday.lab.gpustate`): one file,
``<state_dir>/gpus.json``, holds every GPU's state and the fault records, so a restarted
agent can still revert its leftovers. Inside :meth:`VirtualGpuBackend.batch` (the
agent's batch apply and revert) a thread's changes are published once, when the batch
ends.
"""

import atexit
import contextlib
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any, NamedTuple

import structlog

from gameday.contract.backend import FaultRequest
from gameday.errors import FaultRejected
from gameday.lab.gpustate import (
    GPU_FIELDS,
    GpuState,
    fresh_gpu,
    node_state_path,
    publish_node_state,
    read_node_state,
)
from gameday.lab.vfaults import VIRTUAL_FAULTS, GrowingChange, VirtualFault, is_growing
from gameday.logs import writes_info

__all__ = ["GpuState", "VirtualGpuBackend", "virtual_backend"]

log = structlog.get_logger("gameday.lab.devices")


class _Applied(NamedTuple):  # a tuple: made once per fault, cheaper than a dataclass
    """What one applied fault changed: the GPU, and its fields' values from before.

    ``states``: the GPU's state before and after the fault, when this run applied it;
    while the GPU is still in the state after, reverting puts back the very state from
    before (equal to restoring ``before``, and its JSON is already made)."""

    kind: str
    gpu: int
    before: Mapping[str, Any]
    states: tuple[GpuState, GpuState] | None = None


class _OpenBatch(threading.local):
    """A thread's open batch: how many are nested, and whether one changed a GPU."""

    def __init__(self) -> None:
        self.depth = 0
        self.changed = False


class _Batch:
    """:meth:`VirtualGpuBackend.batch` (a plain context manager: cheaper to enter and
    leave than a generator's, once per request)."""

    __slots__ = ("_backend",)

    def __init__(self, backend: "VirtualGpuBackend") -> None:
        self._backend = backend

    def __enter__(self) -> None:
        batch = self._backend._batch
        if batch.depth == 0:
            batch.changed = False
        batch.depth += 1

    def __exit__(self, *exc_info: object) -> None:
        batch = self._backend._batch
        batch.depth -= 1
        if batch.depth == 0:
            self._backend._end_batch()


class VirtualGpuBackend:
    """Virtual GPUs of one node, and the faults applied to them.

    ``fresh=True`` (a node that just started: volatile counters are reset) publishes
    fresh GPUs and forgets earlier fault records; ``fresh=False`` continues from the
    published state and records (an agent restarted over a persistent state dir).
    """

    name = "virtual"

    def __init__(self, node: str, state_dir: Path, *, gpus: int = 4, fresh: bool = True,
                 faults: Mapping[str, VirtualFault] | None = None) -> None:
        if gpus < 1:
            raise ValueError("a virtual node needs at least one GPU")
        self.node = node
        self.state_dir = state_dir
        self._faults = dict(faults if faults is not None else VIRTUAL_FAULTS)
        self._kinds = MappingProxyType({kind: fault.injected_at  # made once: asked per batch
                                        for kind, fault in self._faults.items()})
        self._lock = threading.Lock()
        self._log = log.bind()  # a logger as configured now, not a proxy per call
        self._batch = _OpenBatch()  # each thread's open batch
        self._growing: dict[str, tuple[GrowingChange, float]] = {}
        self._grower: threading.Thread | None = None
        state_dir.mkdir(parents=True, exist_ok=True)
        published = None if fresh else read_node_state(node_state_path(state_dir))
        known = published.gpus if published is not None else {}
        self._gpus: list[GpuState] = [known.get(index) or fresh_gpu(node, index)
                                      for index in range(gpus)]
        self._applied: dict[str, _Applied] = (
            self._read_records(published.faults) if published is not None else {})
        self._publish()

    # -- Backend protocol -------------------------------------------------------------

    def inventory(self) -> dict[str, Any]:
        with self._lock:
            gpus = [{"index": g.index, "uuid": g.uuid, "name": g.name,
                     "memory_mib": g.memory_total_mib, "nvlink_domain": g.nvlink_domain}
                    for g in self._gpus if g.present]
        return {"node": self.node, "gpus": gpus, "links": [], "mounts": []}

    def kinds(self) -> Mapping[str, str]:
        return self._kinds

    def _fault(self, kind: str) -> VirtualFault:
        fault = self._faults.get(kind)
        if fault is None:
            raise FaultRejected(
                f"fault kind {kind!r} is not supported by the virtual backend; "
                f"supported: {', '.join(sorted(self._faults))}")
        return fault

    def check(self, request: FaultRequest) -> dict[str, Any]:
        """The GPU :meth:`apply` would change, read-only (``{"gpus": [{"index", "uuid",
        "name"}]}``), or the :class:`FaultRejected` it would raise."""
        fault = self._fault(request.kind)
        with self._lock:
            change = fault.validate(request.target,
                                    fault.spec.backend_params(request.params),
                                    tuple(self._gpus))
            gpu = self._gpus[change.gpu]
        return {"gpus": [{"index": gpu.index, "uuid": gpu.uuid, "name": gpu.name}]}

    def apply(self, fault_id: str, request: FaultRequest) -> dict[str, Any]:
        fault = self._fault(request.kind)
        with self._lock:
            change = fault.validate(request.target,
                                    fault.spec.backend_params(request.params),
                                    tuple(self._gpus))
            old = self._gpus[change.gpu]
            changes = change.changes(old)
            new = old.with_values(changes)
            values = vars(old)  # read directly: cheaper than getattr
            before = {name: values[name] for name, value in changes.items()
                      if values[name] != value}
            for name in getattr(change, "grown_fields", ()):
                before.setdefault(name, values[name])  # a growing fault: see _grow
            self._applied[fault_id] = _Applied(request.kind, change.gpu, before, (old, new))
            self._gpus[change.gpu] = new
            if is_growing(change):
                self._growing[fault_id] = (change, time.monotonic())
                self._start_growing()
            self._changed()
        if writes_info(self._log):
            self._log.info("fault_applied", fault_id=fault_id, kind=request.kind,
                           gpu=new.label, changed=sorted(before))
        return {"gpu": new.index, "uuid": new.uuid, "node": self.node, **change.describe(new)}

    def revert(self, fault_id: str, request: FaultRequest) -> None:
        with self._lock:
            self._growing.pop(fault_id, None)
            applied = self._applied.pop(fault_id, None)
            if applied is None:
                return
            current = self._gpus[applied.gpu]
            if applied.states is not None and applied.states[1] is current:
                self._gpus[applied.gpu] = applied.states[0]  # unchanged since: as it was
            else:
                self._gpus[applied.gpu] = current.with_values(applied.before)
            self._changed()
        if writes_info(self._log):
            self._log.info("fault_reverted", fault_id=fault_id, kind=applied.kind,
                           gpu=current.label, restored=sorted(applied.before))

    def batch(self) -> contextlib.AbstractContextManager[None]:
        """Applies and reverts this thread makes inside are published once, when it ends
        (optional batch hook of :class:`gameday.contract.backend.Backend`). Re-entrant;
        publishes even when the batch raises. Other threads' changes are published as
        they happen."""
        return _Batch(self)

    # -- faults that grow (gpu.memory_leak) --------------------------------------------

    def _start_growing(self) -> None:
        """Under the lock: run the thread that grows growing faults, if none runs."""
        if self._grower is None or not self._grower.is_alive():
            self._grower = threading.Thread(target=self._grow, daemon=True,
                                            name=f"grow-{self.node}")
            self._grower.start()

    def _grow(self) -> None:
        """Every tick, set each growing fault's fields to their value by now; ends when
        none is left."""
        while True:
            with self._lock:
                if not self._growing:
                    self._grower = None
                    return
                tick = min(change.tick_s for change, _ in self._growing.values())
                now = time.monotonic()
                for change, started in self._growing.values():
                    current = self._gpus[change.gpu]
                    grown = change.grow(current, now - started)
                    if any(getattr(current, name) != value for name, value in grown.items()):
                        self._gpus[change.gpu] = current.with_values(grown)
                        self._changed()
            time.sleep(tick)

    # -- for the node process ---------------------------------------------------------

    def snapshot(self) -> list[GpuState]:
        """Every GPU's current state."""
        with self._lock:
            return list(self._gpus)

    def _changed(self) -> None:
        """Under the lock: publish the GPUs and records now, or when the batch ends."""
        if self._batch.depth:
            self._batch.changed = True
        else:
            self._publish()

    def _end_batch(self) -> None:
        """A batch ended: publish once, if it changed anything."""
        if self._batch.changed:
            with self._lock:
                self._publish()

    def _publish(self) -> None:
        """Under the lock: every GPU's state and the fault records, in one file."""
        publish_node_state(self.state_dir, self._gpus, {
            fid: {"kind": a.kind, "gpu": a.gpu, "before": dict(a.before)}
            for fid, a in self._applied.items()})

    def _read_records(self, data: Mapping[str, Any]) -> dict[str, _Applied]:
        """The fault records published by an earlier run (unreadable ones are skipped)."""
        records = {}
        for fid, rec in data.items():
            try:
                before = {k: v for k, v in rec["before"].items() if k in GPU_FIELDS}
                gpu = int(rec["gpu"])
                if 0 <= gpu < len(self._gpus):
                    records[str(fid)] = _Applied(str(rec["kind"]), gpu, before)
            except (KeyError, TypeError, ValueError, AttributeError):
                continue
        return records


def virtual_backend(node: str, *, gpus: int = 4) -> VirtualGpuBackend:
    """A 4-GPU virtual backend for ``gameday agent serve --backend virtual``.

    Its state lives in ``$GAMEDAY_VIRTUAL_STATE_DIR/<node>`` (kept across restarts, so
    leftover faults can still be reverted), else in a temporary directory removed at exit.
    """
    base = os.environ.get("GAMEDAY_VIRTUAL_STATE_DIR")
    if base:
        return VirtualGpuBackend(node, Path(base) / node, gpus=gpus, fresh=False)
    tmp = Path(tempfile.mkdtemp(prefix="gameday-virtual-"))
    atexit.register(shutil.rmtree, tmp, True)
    return VirtualGpuBackend(node, tmp, gpus=gpus, fresh=True)

