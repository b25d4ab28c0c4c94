"""NVML: reading GPUs, and the opt-in clock and power settings ``gpu.thermal`` may change.

:class:`Nvml` is the seam; :class:`LibNvml` implements it with ctypes on
``libnvidia-ml.so.1`` (the driver's library; no Python package needed). Reads:
count, name, UUID, PCI bus id, memory, temperature, SM clock (current and max), ECC
volatile totals, clocks-event reasons. Settings (root; only ``gpu.thermal`` with
``allow_device_settings: true`` uses them): locked GPU clocks
(``nvmlDeviceSetGpuLockedClocks`` / ``nvmlDeviceResetGpuLockedClocks``) and the power
limit (``nvmlDeviceSetPowerManagementLimit``, restored to its earlier value).
"""

import ctypes
import threading
from dataclasses import dataclass
from typing import Any, Final, Protocol

__all__ = ["GpuReading", "LibNvml", "Nvml", "NvmlError", "NvmlNotSupported", "read_gpu"]

_LIBRARY: Final = "libnvidia-ml.so.1"
_NVML_ERROR_NOT_SUPPORTED: Final = 3
_NVML_TEMPERATURE_GPU: Final = 0
_NVML_CLOCK_SM: Final = 1
_NVML_MEMORY_ERROR_CORRECTED: Final = 0
_NVML_MEMORY_ERROR_UNCORRECTED: Final = 1
_NVML_VOLATILE_ECC: Final = 0


class NvmlError(Exception):
    """An NVML call failed: ``nvmlDeviceSetGpuLockedClocks: Insufficient Permissions``."""


class NvmlNotSupported(NvmlError):
    """The device does not support the call (``NVML_ERROR_NOT_SUPPORTED``)."""


class Nvml(Protocol):
    """The NVML calls gameday uses; GPUs are addressed by NVML index."""

    def unavailable(self) -> str | None:
        """None when NVML is usable, else a one-line reason."""
        ...

    def device_count(self) -> int: ...

    def name(self, index: int) -> str: ...

    def uuid(self, index: int) -> str: ...

    def pci_bus_id(self, index: int) -> str:
        """``00000000:18:00.0``, as NVML writes it."""
        ...

    def memory(self, index: int) -> tuple[int, int, int]:
        """``(total, used, free)`` bytes."""
        ...

    def temperature_c(self, index: int) -> int: ...

    def sm_clock_mhz(self, index: int) -> tuple[int, int]:
        """``(current, max)`` SM clock."""
        ...

    def ecc_volatile(self, index: int) -> tuple[int, int]:
        """``(corrected, uncorrected)`` volatile ECC error totals."""
        ...

    def clocks_event_reasons(self, index: int) -> int: ...

    def set_locked_clocks(self, index: int, min_mhz: int, max_mhz: int) -> None: ...

    def reset_locked_clocks(self, index: int) -> None: ...

    def power_limit_mw(self, index: int) -> tuple[int, int, int]:
        """``(current, min, max)`` power management limit, milliwatts."""
        ...

    def set_power_limit_mw(self, index: int, milliwatts: int) -> None: ...


@dataclass(frozen=True)
class GpuReading:
    """What NVML says about one GPU; a field is None where the device does not say."""

    index: int
    name: str
    uuid: str
    pci_bus_id: str
    memory_total: int
    memory_used: int
    memory_free: int
    temperature_c: int | None
    sm_clock_mhz: int | None
    max_sm_clock_mhz: int | None
    ecc_corrected: int | None
    ecc_uncorrected: int | None
    clocks_event_reasons: int | None

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _optional(call: Any, *args: Any) -> Any:
    try:
        return call(*args)
    except NvmlNotSupported:
        return None


def read_gpu(nvml: Nvml, index: int) -> GpuReading:
    """Every read of one GPU; unsupported fields (e.g. ECC off) are None."""
    total, used, free = nvml.memory(index)
    clocks = _optional(nvml.sm_clock_mhz, index)
    ecc = _optional(nvml.ecc_volatile, index)
    return GpuReading(index=index, name=nvml.name(index), uuid=nvml.uuid(index),
                      pci_bus_id=nvml.pci_bus_id(index), memory_total=total,
                      memory_used=used, memory_free=free,
                      temperature_c=_optional(nvml.temperature_c, index),
                      sm_clock_mhz=clocks[0] if clocks else None,
                      max_sm_clock_mhz=clocks[1] if clocks else None,
                      ecc_corrected=ecc[0] if ecc else None,
                      ecc_uncorrected=ecc[1] if ecc else None,
                      clocks_event_reasons=_optional(nvml.clocks_event_reasons, index))


class _PciInfo(ctypes.Structure):
    _fields_ = [("busIdLegacy", ctypes.c_char * 16), ("domain", ctypes.c_uint),
                ("bus", ctypes.c_uint), ("device", ctypes.c_uint),
                ("pciDeviceId", ctypes.c_uint), ("pciSubSystemId", ctypes.c_uint),
                ("busId", ctypes.c_char * 32)]


class _Memory(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong),
                ("used", ctypes.c_ulonglong)]


class LibNvml:
    """:class:`Nvml` on the real ``libnvidia-ml.so.1`` through ctypes.

    Loading never raises: :meth:`unavailable` says why NVML cannot be used.
    """

    def __init__(self, library: str = _LIBRARY) -> None:
        self._lib: ctypes.CDLL | None = None
        self._reason: str | None = None
        self._lock = threading.Lock()
        try:
            self._lib = ctypes.CDLL(library)
        except OSError as exc:
            self._reason = f"no NVIDIA driver ({exc})"
            return
        try:
            self._call("nvmlInit_v2")
        except NvmlError as exc:
            self._lib, self._reason = None, f"NVML does not initialise: {exc}"

    def unavailable(self) -> str | None:
        return self._reason

    def _call(self, name: str, *args: object) -> None:
        if self._lib is None:
            raise NvmlError(self._reason or "NVML is not loaded")
        with self._lock:
            result = int(getattr(self._lib, name)(*args))
        if result != 0:
            error = self._lib.nvmlErrorString
            error.restype = ctypes.c_char_p
            text = error(result)
            message = f"{name}: {text.decode() if text else f'nvmlReturn {result}'}"
            if result == _NVML_ERROR_NOT_SUPPORTED:
                raise NvmlNotSupported(message)
            raise NvmlError(message)

    def _handle(self, index: int) -> ctypes.c_void_p:
        handle = ctypes.c_void_p()
        self._call("nvmlDeviceGetHandleByIndex_v2", ctypes.c_uint(index), ctypes.byref(handle))
        return handle

    def _uint(self, name: str, index: int, *args: object) -> int:
        value = ctypes.c_uint()
        self._call(name, self._handle(index), *args, ctypes.byref(value))
        return value.value

    def _text(self, name: str, index: int, size: int = 96) -> str:
        buffer = ctypes.create_string_buffer(size)
        self._call(name, self._handle(index), buffer, ctypes.c_uint(size))
        return buffer.value.decode()

    def device_count(self) -> int:
        count = ctypes.c_uint()
        self._call("nvmlDeviceGetCount_v2", ctypes.byref(count))
        return count.value

    def name(self, index: int) -> str:
        return self._text("nvmlDeviceGetName", index)

    def uuid(self, index: int) -> str:
        return self._text("nvmlDeviceGetUUID", index)

    def pci_bus_id(self, index: int) -> str:
        info = _PciInfo()
        self._call("nvmlDeviceGetPciInfo_v3", self._handle(index), ctypes.byref(info))
        return str(info.busId.decode())

    def memory(self, index: int) -> tuple[int, int, int]:
        memory = _Memory()
        self._call("nvmlDeviceGetMemoryInfo", self._handle(index), ctypes.byref(memory))
        return memory.total, memory.used, memory.free

    def temperature_c(self, index: int) -> int:
        return self._uint("nvmlDeviceGetTemperature", index,
                          ctypes.c_int(_NVML_TEMPERATURE_GPU))

    def sm_clock_mhz(self, index: int) -> tuple[int, int]:
        return (self._uint("nvmlDeviceGetClockInfo", index, ctypes.c_int(_NVML_CLOCK_SM)),
                self._uint("nvmlDeviceGetMaxClockInfo", index, ctypes.c_int(_NVML_CLOCK_SM)))

    def ecc_volatile(self, index: int) -> tuple[int, int]:
        counts = []
        for error_type in (_NVML_MEMORY_ERROR_CORRECTED, _NVML_MEMORY_ERROR_UNCORRECTED):
            value = ctypes.c_ulonglong()
            self._call("nvmlDeviceGetTotalEccErrors", self._handle(index),
                       ctypes.c_int(error_type), ctypes.c_int(_NVML_VOLATILE_ECC),
                       ctypes.byref(value))
            counts.append(value.value)
        return counts[0], counts[1]

    def clocks_event_reasons(self, index: int) -> int:
        value = ctypes.c_ulonglong()
        name = "nvmlDeviceGetCurrentClocksEventReasons"  # older drivers: ...ThrottleReasons
        if self._lib is not None and not hasattr(self._lib, name):
            name = "nvmlDeviceGetCurrentClocksThrottleReasons"
        self._call(name, self._handle(index), ctypes.byref(value))
        return value.value

    def set_locked_clocks(self, index: int, min_mhz: int, max_mhz: int) -> None:
        self._call("nvmlDeviceSetGpuLockedClocks", self._handle(index), ctypes.c_uint(min_mhz),
                   ctypes.c_uint(max_mhz))

    def reset_locked_clocks(self, index: int) -> None:
        self._call("nvmlDeviceResetGpuLockedClocks", self._handle(index))

    def power_limit_mw(self, index: int) -> tuple[int, int, int]:
        current = self._uint("nvmlDeviceGetPowerManagementLimit", index)
        low, high = ctypes.c_uint(), ctypes.c_uint()
        self._call("nvmlDeviceGetPowerManagementLimitConstraints", self._handle(index),
                   ctypes.byref(low), ctypes.byref(high))
        return current, low.value, high.value

    def set_power_limit_mw(self, index: int, milliwatts: int) -> None:
        self._call("nvmlDeviceSetPowerManagementLimit", self._handle(index),
                   ctypes.c_uint(milliwatts))
