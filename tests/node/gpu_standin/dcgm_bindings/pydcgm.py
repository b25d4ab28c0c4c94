"""STAND-IN for DCGM's ``pydcgm``: a handle to an in-process pretend host engine."""

import ctypes

import dcgm_agent


class DcgmHandle:
    def __init__(self, handle: object = None, ipAddress: str | None = None) -> None:
        if ipAddress != "127.0.0.1":
            raise RuntimeError(f"no host engine at {ipAddress}")
        self.handle = ctypes.c_void_p(0x7FFFFFFE)
        dcgm_agent.ENGINE["connected"] = True
