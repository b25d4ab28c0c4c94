"""STAND-IN for DCGM's test-only ``dcgm_agent_internal`` (DCGM's test package): field
injection."""

import ctypes

import dcgm_agent
import dcgm_structs_internal


def dcgmInjectFieldValue(handle: object, gpu_id: int, value: object) -> int:
    assert isinstance(value, dcgm_structs_internal.c_dcgmInjectFieldValue_v1)
    assert value.version == dcgm_structs_internal.dcgmInjectFieldValue_version1
    assert value.fieldType == ord("i") and value.ts > 1_600_000_000_000_000
    assert isinstance(handle, ctypes.c_void_p) and gpu_id in dcgm_agent.ENGINE["gpus"]
    dcgm_agent.ENGINE["values"][(gpu_id, value.fieldId)] = value.value.i64
    dcgm_agent.ENGINE["injected"].append([gpu_id, value.fieldId, value.value.i64])
    return 0
