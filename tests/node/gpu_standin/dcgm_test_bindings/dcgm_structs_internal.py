"""STAND-IN for DCGM's ``dcgm_structs_internal``: the injection structure."""

import ctypes

from tests.node.gpu_standin.dcgm_bindings.dcgm_structs import c_dcgmFieldValue_v1_value

dcgmInjectFieldValue_version1 = 0x1000020


class c_dcgmInjectFieldValue_v1(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint), ("fieldId", ctypes.c_ushort),
                ("fieldType", ctypes.c_ushort), ("status", ctypes.c_int),
                ("ts", ctypes.c_int64), ("value", c_dcgmFieldValue_v1_value)]
