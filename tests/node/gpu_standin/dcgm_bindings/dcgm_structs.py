"""STAND-IN for DCGM's ``dcgm_structs`` binding module: the field-value structure."""

import ctypes


class c_dcgmFieldValue_v1_value(ctypes.Union):
    _fields_ = [("i64", ctypes.c_int64), ("dbl", ctypes.c_double),
                ("str", ctypes.c_char * 256)]


class c_dcgmFieldValue_v1(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint), ("fieldId", ctypes.c_ushort),
                ("fieldType", ctypes.c_ushort), ("status", ctypes.c_int),
                ("ts", ctypes.c_int64), ("value", c_dcgmFieldValue_v1_value)]
