"""The state of a node's virtual GPUs, as the node publishes it and shards follow it.

A node publishes every GPU's state, and its backend's fault records, in one file,
``<state_dir>/gpus.json`` (``{"gpus": [GpuState...], "faults": {...}}``), replaced
atomically once per change (once per batch of changes). A shard bound to one GPU follows
it with a ``stat`` per request (:class:`GpuStateWatcher`), re-reading only when the file
was replaced, and picks its GPU's entry. A :class:`GpuState` is immutable.
"""

import dataclasses
import functools
import hashlib
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from gameday import jsonbytes
from gameday.contract.gpus import gpu_label
from gameday.lab.files import read_json, write_atomic

__all__ = [
    "CLOCK_EVENT_HW_THERMAL",
    "CLOCK_EVENT_SW_THERMAL",
    "GPU_FIELDS",
    "MEMORY_TOTAL_MIB",
    "MODEL_NAME",
    "SM_CLOCK_MHZ",
    "GpuState",
    "GpuStateWatcher",
    "NodeState",
    "fresh_gpu",
    "gpu_uuid",
    "node_state_path",
    "publish_node_state",
    "read_node_state",
]

MODEL_NAME = "NVIDIA H100 80GB HBM3 (virtual)"
MEMORY_TOTAL_MIB = 81559
SM_CLOCK_MHZ = 1980  # the maximum (and, healthy, the current) SM clock
IDLE_MEMORY_MIB = 1
#: Clocks-event reason bits (NVML ``nvmlClocksEventReason*``, DCGM field 112).
CLOCK_EVENT_SW_THERMAL = 0x20
CLOCK_EVENT_HW_THERMAL = 0x40


def gpu_uuid(node: str, index: int) -> str:
    """A deterministic, NVIDIA-shaped UUID for GPU ``index`` of ``node``."""
    h = hashlib.sha256(f"gameday-lab/{node}/{index}".encode()).hexdigest()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


@dataclass(frozen=True)
class GpuState:
    """What a node knows about one of its virtual GPUs (never changed in place: copy
    with :meth:`with_values`)."""

    node: str
    index: int
    uuid: str
    name: str
    memory_total_mib: int
    memory_used_mib: int
    temperature_c: float
    sm_clock_mhz: int
    ecc_sbe_total: int  # volatile single-bit ECC errors since the last reset
    ecc_dbe_total: int  # volatile double-bit ECC errors since the last reset
    last_xid: int  # the last Xid reported; 0: none since the last reset
    nvlink_domain: str
    present: bool  # False: fell off the bus
    weights_corrupted: bool  # silent corruption of what lives in its memory
    clock_event_reasons: int = 0  # bitmask of why clocks are held down (0x20/0x40 thermal)

    @property
    def label(self) -> str:
        """``node-0/gpu1``."""
        return gpu_label(self.node, self.index)

    def with_values(self, changes: Mapping[str, Any]) -> "GpuState":
        """A copy with ``changes`` (field name to value); ``TypeError`` for a name that
        is no field."""
        if not changes.keys() <= GPU_FIELDS:
            raise TypeError(f"GpuState has no field {min(changes.keys() - GPU_FIELDS)!r}")
        return dataclasses.replace(self, **changes)

    def to_json(self) -> dict[str, Any]:
        """Every field by name (plain values: no deep copy, as ``asdict`` makes, needed)."""
        return dict(vars(self))

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "GpuState":
        return cls(**{f.name: data[f.name] for f in fields(cls) if f.name in data})


#: The names of :class:`GpuState`'s fields.
GPU_FIELDS = frozenset(f.name for f in fields(GpuState))


def fresh_gpu(node: str, index: int) -> GpuState:
    """A healthy, idle GPU as it is after a reset."""
    return GpuState(node=node, index=index, uuid=gpu_uuid(node, index), name=MODEL_NAME,
                    memory_total_mib=MEMORY_TOTAL_MIB, memory_used_mib=IDLE_MEMORY_MIB,
                    temperature_c=34.0 + index, sm_clock_mhz=SM_CLOCK_MHZ, ecc_sbe_total=0,
                    ecc_dbe_total=0, last_xid=0, nvlink_domain=node, present=True,
                    weights_corrupted=False)


@functools.lru_cache(maxsize=256)  # a publish looks it up each time
def node_state_path(state_dir: Path) -> Path:
    """Where a node publishes its GPUs' state: ``<state_dir>/gpus.json``."""
    return state_dir / "gpus.json"


@dataclass(frozen=True)
class NodeState:
    """What a node published: its GPUs by index, and its backend's fault records (plain
    JSON, opaque to shards)."""

    gpus: Mapping[int, GpuState]
    faults: Mapping[str, Any]


def publish_node_state(state_dir: Path, gpus: Sequence[GpuState],
                       faults: dict[str, Any]) -> None:
    """Publish every GPU's state and the fault records atomically, in one file."""
    write_atomic(node_state_path(state_dir),
                 jsonbytes.dumps({"gpus": [gpu.to_json() for gpu in gpus], "faults": faults}))


def read_node_state(path: Path) -> NodeState | None:
    """The node state published at ``path``; ``None`` if missing or unreadable. A GPU
    entry that cannot be read is left out; records that are not an object are ``{}``."""
    data = read_json(path)
    if not isinstance(data, dict) or not isinstance(data.get("gpus"), list):
        return None
    gpus: dict[int, GpuState] = {}
    for entry in data["gpus"]:
        try:
            state = GpuState.from_json(entry)
        except (KeyError, TypeError):
            continue
        gpus[state.index] = state
    faults = data.get("faults")
    return NodeState(gpus, faults if isinstance(faults, dict) else {})


class GpuStateWatcher:
    """Follows one GPU in a published node state file (:func:`node_state_path`);
    re-reads the file only when it was replaced."""

    def __init__(self, path: Path, gpu: int) -> None:
        self.path = path
        self.gpu = gpu
        self._key: tuple[int, int, int] | None = None
        self._state: GpuState | None = None

    def current(self) -> GpuState | None:
        """The GPU's latest published state (``None`` while there is no file, or no
        entry for the GPU)."""
        try:
            st = os.stat(self.path)
        except OSError:
            self._key, self._state = None, None
            return None
        key = (st.st_ino, st.st_mtime_ns, st.st_size)
        if key != self._key:
            published = read_node_state(self.path)
            if published is not None:
                self._key, self._state = key, published.gpus.get(self.gpu)
        return self._state
