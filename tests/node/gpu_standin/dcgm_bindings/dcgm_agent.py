"""STAND-IN for DCGM's public ``dcgm_agent``: two GPUs whose DCGM ids are not NVML's indexes."""

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


def dcgmEntityGetLatestValues(handle: object, entity_group: int, entity_id: int,
                              field_ids: list[int]) -> Any:
    """The public read: latest values of one entity (group 1 = GPU)."""
    import dcgm_structs

    assert entity_group == 1
    values = (dcgm_structs.c_dcgmFieldValue_v1 * len(field_ids))()
    for slot, field_id in zip(values, field_ids, strict=True):
        slot.fieldId = field_id
        slot.value.i64 = ENGINE["values"].get((entity_id, field_id), 0x7FFFFFFFFFFFFFF0)
    return values
