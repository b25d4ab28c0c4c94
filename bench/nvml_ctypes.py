"""A read-only NVML reader on ctypes, for ``bench/gpu_check.py`` on a bare machine.

A check tool, not part of the product: the product reaches NVML through ``pynvml``
(:class:`gameday.node.host.nvml.LibNvml`) and never imports this module. A lent GPU
machine has only the system Python and no package index, so ``pynvml`` cannot be
installed there; :class:`CtypesNvml` gives the check the same
:class:`~gameday.node.host.nvml.Nvml` reads straight from the driver's
``libnvidia-ml.so.1``, with the same errors (:class:`~gameday.node.host.nvml.NvmlError`
and its subclasses), plus the persistence mode and the driver and CUDA driver versions.

It can change nothing: only NVML functions named ``nvmlInit*``, ``nvmlErrorString``,
``nvmlSystemGet*`` and ``nvmlDeviceGet*`` are ever looked up
(:func:`is_read`), and the Protocol's setters raise :class:`ReadOnly` without calling
NVML.
"""

import ctypes
import re
from typing import Any, Final

from gameday.node.host.nvml import (
    NvmlDeprecated,
    NvmlError,
    NvmlFunctionMissing,
    NvmlNoPermission,
    NvmlNotSupported,
    cuda_version_text,
)

__all__ = ["CtypesNvml", "ReadOnly", "is_read"]

_LIBRARY: Final = "libnvidia-ml.so.1"
_READS: Final = re.compile(r"nvml(Init\w*|ErrorString|SystemGet\w+|DeviceGet\w+)")
_ERRORS: Final[dict[int, type[NvmlError]]] = {
    3: NvmlNotSupported, 4: NvmlNoPermission, 13: NvmlFunctionMissing, 26: NvmlDeprecated}
_TEMPERATURE_GPU: Final = 0
_CLOCK_SM: Final = 1
_VOLATILE_ECC: Final = 0
_NAME_BUFFER: Final = 96  # NVML_DEVICE_NAME_V2_BUFFER_SIZE, also enough for a UUID
_VERSION_BUFFER: Final = 80  # NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE


class ReadOnly(NvmlError):
    """A setting was asked of the read-only reader: nothing was called."""


def is_read(name: str) -> bool:
    """Whether ``name`` is an NVML function that only reads (or starts NVML)."""
    return _READS.fullmatch(name) is not None and not re.search(r"Set|Reset|Clear", name)


class _PciInfo(ctypes.Structure):
    _fields_ = [("busIdLegacy", ctypes.c_char * 16), ("domain", ctypes.c_uint),
                ("bus", ctypes.c_uint), ("device", ctypes.c_uint),
                ("pciDeviceId", ctypes.c_uint), ("pciSubSystemId", ctypes.c_uint),
                ("busId", ctypes.c_char * 32)]


class _Memory(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong),
                ("used", ctypes.c_ulonglong)]


class _Temperature(ctypes.Structure):
    """``nvmlTemperature_v1_t``; its version word is ``sizeof | 1 << 24``."""

    _fields_ = [("version", ctypes.c_uint), ("sensorType", ctypes.c_int),
                ("temperature", ctypes.c_int)]


class CtypesNvml:
    """The :class:`~gameday.node.host.nvml.Nvml` reads on ``libnvidia-ml.so.1`` via ctypes.

    Loading never raises: :meth:`unavailable` says why NVML cannot be used, and every
    call then raises :class:`NvmlError` with that reason. Newer calls fall back to their
    older names only where the driver lacks them, as :class:`LibNvml` does.
    """

    def __init__(self, library: str = _LIBRARY) -> None:
        self._lib: ctypes.CDLL | None = None
        self._reason: str | None = None
        try:
            self._lib = ctypes.CDLL(library)
        except OSError as exc:
            self._reason = f"no NVIDIA driver ({exc})"
            return
        self._lib.nvmlErrorString.restype = ctypes.c_char_p
        try:
            self._call("nvmlInit_v2")
        except NvmlError as exc:
            self._lib, self._reason = None, f"NVML does not initialise: {exc}"

    def unavailable(self) -> str | None:
        return self._reason

    def _call(self, name: str, *args: Any) -> None:
        """``name(*args)``, which must be a read; a non-zero result as its NvmlError."""
        if not is_read(name):
            raise ReadOnly(f"{name}: not a read; this reader never calls it")
        if self._lib is None:
            raise NvmlError(self._reason or "NVML is not loaded")
        try:
            function = getattr(self._lib, name)
        except AttributeError:
            raise NvmlFunctionMissing(f"{name}: not in this driver's NVML") from None
        result = int(function(*args))
        if result != 0:
            text = self._lib.nvmlErrorString(result)
            message = text.decode() if text else f"nvmlReturn_t {result}"
            raise _ERRORS.get(result, NvmlError)(f"{name}: {message}")

    def _device(self, name: str, index: int, *args: Any) -> None:
        """``name(handle of GPU index, *args)``."""
        handle = ctypes.c_void_p()
        self._call("nvmlDeviceGetHandleByIndex_v2", ctypes.c_uint(index), ctypes.byref(handle))
        self._call(name, handle, *args)

    def _text(self, name: str, index: int) -> str:
        buffer = ctypes.create_string_buffer(_NAME_BUFFER)
        self._device(name, index, buffer, ctypes.c_uint(_NAME_BUFFER))
        return buffer.value.decode()

    def _uint(self, name: str, index: int, *args: Any) -> int:
        value = ctypes.c_uint()
        self._device(name, index, *args, ctypes.byref(value))
        return value.value

    def device_count(self) -> int:
        count = ctypes.c_uint()
        self._call("nvmlDeviceGetCount_v2", ctypes.byref(count))
        return count.value

    def name(self, index: int) -> str:
        return self._text("nvmlDeviceGetName", index)

    def uuid(self, index: int) -> str:
        return self._text("nvmlDeviceGetUUID", index)

    def pci_bus_id(self, index: int) -> str:
        pci = _PciInfo()
        self._device("nvmlDeviceGetPciInfo_v3", index, ctypes.byref(pci))
        return bytes(pci.busId).decode()

    def memory(self, index: int) -> tuple[int, int, int]:
        memory = _Memory()
        self._device("nvmlDeviceGetMemoryInfo", index, ctypes.byref(memory))
        return memory.total, memory.used, memory.free

    def temperature_c(self, index: int) -> int:
        """Through ``nvmlDeviceGetTemperatureV``; the deprecated
        ``nvmlDeviceGetTemperature`` only where the driver lacks the first."""
        reading = _Temperature(version=ctypes.sizeof(_Temperature) | 1 << 24,
                               sensorType=_TEMPERATURE_GPU)
        try:
            self._device("nvmlDeviceGetTemperatureV", index, ctypes.byref(reading))
        except NvmlFunctionMissing:
            return self._uint("nvmlDeviceGetTemperature", index, ctypes.c_int(_TEMPERATURE_GPU))
        return int(reading.temperature)

    def sm_clock_mhz(self, index: int) -> tuple[int, int]:
        return (self._uint("nvmlDeviceGetClockInfo", index, ctypes.c_int(_CLOCK_SM)),
                self._uint("nvmlDeviceGetMaxClockInfo", index, ctypes.c_int(_CLOCK_SM)))

    def ecc_volatile(self, index: int) -> tuple[int, int]:
        totals = []
        for error_type in (0, 1):  # corrected, uncorrected
            count = ctypes.c_ulonglong()
            self._device("nvmlDeviceGetTotalEccErrors", index, ctypes.c_int(error_type),
                         ctypes.c_int(_VOLATILE_ECC), ctypes.byref(count))
            totals.append(count.value)
        return totals[0], totals[1]

    def clocks_event_reasons(self, index: int) -> int:
        """``nvmlDeviceGetCurrentClocksEventReasons``; its older name only where the
        driver lacks it."""
        reasons = ctypes.c_ulonglong()
        try:
            self._device("nvmlDeviceGetCurrentClocksEventReasons", index, ctypes.byref(reasons))
        except NvmlFunctionMissing:
            self._device("nvmlDeviceGetCurrentClocksThrottleReasons", index,
                         ctypes.byref(reasons))
        return reasons.value

    def set_locked_clocks(self, index: int, min_mhz: int, max_mhz: int) -> None:
        raise ReadOnly("set_locked_clocks: this reader changes no GPU setting")

    def reset_locked_clocks(self, index: int) -> None:
        raise ReadOnly("reset_locked_clocks: this reader changes no GPU setting")

    def power_limit_mw(self, index: int) -> tuple[int, int, int]:
        low, high = ctypes.c_uint(), ctypes.c_uint()
        current = self._uint("nvmlDeviceGetPowerManagementLimit", index)
        self._device("nvmlDeviceGetPowerManagementLimitConstraints", index,
                     ctypes.byref(low), ctypes.byref(high))
        return current, low.value, high.value

    def set_power_limit_mw(self, index: int, milliwatts: int) -> None:
        raise ReadOnly("set_power_limit_mw: this reader changes no GPU setting")

    def mig_enabled(self, index: int) -> bool:
        current, pending = ctypes.c_uint(), ctypes.c_uint()
        try:
            self._device("nvmlDeviceGetMigMode", index, ctypes.byref(current),
                         ctypes.byref(pending))
        except NvmlNotSupported:
            return False
        return current.value == 1

    def compute_mode(self, index: int) -> int:
        mode = ctypes.c_int()
        self._device("nvmlDeviceGetComputeMode", index, ctypes.byref(mode))
        return mode.value

    def persistence_mode(self, index: int) -> bool:
        return self._uint("nvmlDeviceGetPersistenceMode", index) == 1

    def driver_version(self) -> str:
        buffer = ctypes.create_string_buffer(_VERSION_BUFFER)
        self._call("nvmlSystemGetDriverVersion", buffer, ctypes.c_uint(_VERSION_BUFFER))
        return buffer.value.decode()

    def cuda_driver_version(self) -> str:
        """``12.4`` for NVML's 12040 (``..._v2``, else the older unversioned call)."""
        version = ctypes.c_int()
        try:
            self._call("nvmlSystemGetCudaDriverVersion_v2", ctypes.byref(version))
        except NvmlFunctionMissing:
            self._call("nvmlSystemGetCudaDriverVersion", ctypes.byref(version))
        return cuda_version_text(version.value)
