"""The state of one virtual GPU, as a node publishes it and shards follow it.

Each GPU's state is written atomically to ``<state_dir>/gpu-<i>.json`` on every change;
a shard bound to the GPU follows it with a ``stat`` per request
(:class:`GpuStateWatcher`), re-reading only when the file was replaced.
"""

import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

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
    "fresh_gpu",
    "gpu_state_path",
    "gpu_uuid",
    "publish_gpu_state",
    "read_gpu_state",
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
    """What a node knows about one of its virtual GPUs."""

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
        return f"{self.node}/gpu{self.index}"

    def to_json(self) -> dict[str, Any]:
        return dict(vars(self))  # every field is a plain value: no deep copy (asdict) needed

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


def gpu_state_path(state_dir: Path, index: int) -> Path:
    """Where GPU ``index``'s state is published: ``<state_dir>/gpu-<index>.json``."""
    return state_dir / f"gpu-{index}.json"


def publish_gpu_state(state_dir: Path, state: GpuState) -> None:
    """Publish ``state`` atomically."""
    write_atomic(gpu_state_path(state_dir, state.index), json.dumps(state.to_json()))


def read_gpu_state(path: Path) -> GpuState | None:
    """The state published at ``path``; ``None`` if missing or unreadable."""
    data = read_json(path)
    if not isinstance(data, dict):
        return None
    try:
        return GpuState.from_json(data)
    except (KeyError, TypeError):
        return None


class GpuStateWatcher:
    """Follows one published GPU state file; re-reads it only when it was replaced."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._key: tuple[int, int, int] | None = None
        self._state: GpuState | None = None

    def current(self) -> GpuState | None:
        """The latest published state (``None`` while there is no file)."""
        try:
            st = os.stat(self.path)
        except OSError:
            self._key, self._state = None, None
            return None
        key = (st.st_ino, st.st_mtime_ns, st.st_size)
        if key != self._key:
            state = read_gpu_state(self.path)
            if state is not None:
                self._key, self._state = key, state
        return self._state
