"""STAND-IN for DCGM's ``dcgm_agent``: two GPUs whose DCGM ids are not NVML's indexes."""

from types import SimpleNamespace
from typing import Any

#: The pretend host engine: GPU id -> UUID, and (gpu id, field id) -> value.
ENGINE: dict[str, Any] = {
    "gpus": {7: b"GPU-00000000-0000-0000-0000-000000000000",
             9: b"GPU-00000000-0000-0000-0000-000000000001"},
    "values": {(9, 310): 4},
    "injected": [],
    "connected": False,
}


def dcgmGetAllSupportedDevices(handle: object) -> list[int]:
    return sorted(ENGINE["gpus"])


def dcgmGetDeviceAttributes(handle: object, gpu_id: int) -> Any:
    return SimpleNamespace(identifiers=SimpleNamespace(uuid=ENGINE["gpus"][gpu_id]))
