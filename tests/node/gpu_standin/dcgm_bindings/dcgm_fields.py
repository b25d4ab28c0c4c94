"""STAND-IN for DCGM's ``dcgm_fields``."""

DCGM_FT_INT64 = "i"
DCGM_FT_DOUBLE = "d"
