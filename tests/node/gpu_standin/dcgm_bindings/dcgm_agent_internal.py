"""STAND-IN for DCGM's ``dcgm_agent_internal``: latest values and field injection."""

import ctypes

import dcgm_agent
import dcgm_structs
import dcgm_structs_internal

BLANK = 0x7FFFFFFFFFFFFFF0


def dcgmGetLatestValuesForFields(handle: object, gpu_id: int, field_ids: list[int]):
    values = (dcgm_structs.c_dcgmFieldValue_v1 * len(field_ids))()
    for slot, field_id in zip(values, field_ids, strict=True):
        slot.fieldId = field_id
        slot.value.i64 = dcgm_agent.ENGINE["values"].get((gpu_id, field_id), BLANK)
    return values


def dcgmInjectFieldValue(handle: object, gpu_id: int, value: object) -> int:
    assert isinstance(value, dcgm_structs_internal.c_dcgmInjectFieldValue_v1)
    assert value.version == dcgm_structs_internal.dcgmInjectFieldValue_version1
    assert value.fieldType == ord("i") and value.ts > 1_600_000_000_000_000
    assert isinstance(handle, ctypes.c_void_p) and gpu_id in dcgm_agent.ENGINE["gpus"]
    dcgm_agent.ENGINE["values"][(gpu_id, value.fieldId)] = value.value.i64
    dcgm_agent.ENGINE["injected"].append([gpu_id, value.fieldId, value.value.i64])
    return 0
