"""NVML: reading GPUs, and the opt-in clock and power settings ``gpu.thermal`` may change.

:class:`Nvml` is the seam; :class:`LibNvml` implements it with ``pynvml`` (the
``nvidia-ml-py`` package) over the driver's ``libnvidia-ml.so.1``. Reads: count, name,
UUID, PCI bus id, memory, temperature, SM clock (current and max), ECC volatile totals,
clocks-event reasons, power limit, MIG and compute modes (and, outside the seam, the
persistence mode and the driver and CUDA driver versions). Settings (root; only
``gpu.thermal`` with ``allow_device_settings: true`` uses one): the power limit
(``nvmlDeviceSetPowerManagementLimit``, restored to its earlier value). The locked-clock
calls stay in the seam for completeness, but no fault uses them: NVML cannot read an
existing clock lock back, so a lock could not be restored exactly.

``pynvml`` is imported when present: without it (a bare system Python running
``bench/gpu_check.py``) :meth:`LibNvml.unavailable` says so.
"""

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, Protocol

__all__ = ["COMPUTE_MODES_NOT_SHARED", "HAVE_PYNVML", "GpuReading", "LibNvml", "Nvml",
           "NvmlDeprecated", "NvmlError", "NvmlFunctionMissing", "NvmlNoPermission",
           "NvmlNotSupported", "cuda_version_text", "read_gpu"]

_pynvml: Any
try:
    _pynvml = importlib.import_module("pynvml")
except ImportError:
    _pynvml = None

#: Whether ``pynvml`` could be imported (without it, NVML is unavailable).
HAVE_PYNVML: Final = _pynvml is not None

_LIBRARY: Final = "libnvidia-ml.so.1"
_NVML_TEMPERATURE_GPU: Final = 0
_NVML_CLOCK_SM: Final = 1
_NVML_MEMORY_ERROR_CORRECTED: Final = 0
_NVML_MEMORY_ERROR_UNCORRECTED: Final = 1
_NVML_VOLATILE_ECC: Final = 0


class NvmlError(Exception):
    """An NVML call failed: ``nvmlDeviceSetGpuLockedClocks: Insufficient Permissions``."""


class NvmlNotSupported(NvmlError):
    """The device does not support the call (``NVML_ERROR_NOT_SUPPORTED``): a read gives
    no value, a setting needs another way."""


class NvmlFunctionMissing(NvmlNotSupported):
    """The driver's NVML has no such call (older than the call): a caller may try the
    call's older name; otherwise the same as not supported."""


class NvmlDeprecated(NvmlNotSupported):
    """The driver no longer answers this deprecated call (``NVML_ERROR_DEPRECATED``):
    the same as not supported."""


class NvmlNoPermission(NvmlError):
    """The call needs more privilege than the agent has (settings need root)."""


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

    def mig_enabled(self, index: int) -> bool:
        """Whether MIG mode is on now (False where the GPU has no MIG)."""
        ...

    def compute_mode(self, index: int) -> int:
        """NVML's compute mode: 0 default, 2 prohibited, 3 exclusive-process."""
        ...


#: NVML's compute modes in which a second process cannot share the GPU.
COMPUTE_MODES_NOT_SHARED: Final = {2: "prohibited", 3: "exclusive-process"}


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


def cuda_version_text(code: int) -> str:
    """NVML's CUDA driver version code as CUDA writes it: ``12.4`` for 12040."""
    return f"{code // 1000}.{code % 1000 // 10}"


def _nvml_error(name: str, exc: Exception) -> NvmlError:
    """``exc`` (a pynvml ``NVMLError``) as the :class:`NvmlError` that says what it means."""
    message = f"{name}: {exc}"
    deprecated = getattr(_pynvml, "NVMLError_Deprecated", None)
    if isinstance(exc, _pynvml.NVMLError_NotSupported):
        return NvmlNotSupported(message)
    if isinstance(exc, _pynvml.NVMLError_FunctionNotFound):
        return NvmlFunctionMissing(message)
    if deprecated is not None and isinstance(exc, deprecated):
        return NvmlDeprecated(message)
    if isinstance(exc, _pynvml.NVMLError_NoPermission):
        return NvmlNoPermission(message)
    return NvmlError(message)


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


class LibNvml:
    """:class:`Nvml` on the real ``libnvidia-ml.so.1`` through ``pynvml``.

    Loading never raises: :meth:`unavailable` says why NVML cannot be used, and every
    call then raises :class:`NvmlError` with that reason. NVML's calls are thread-safe.
    """

    def __init__(self) -> None:
        self._reason: str | None = None
        if _pynvml is None:
            self._reason = "no pynvml to reach NVML (install nvidia-ml-py)"
            return
        try:
            _pynvml.nvmlInit()
        except _pynvml.NVMLError_LibraryNotFound as exc:
            self._reason = f"no NVIDIA driver ({_LIBRARY}: {exc})"
        except _pynvml.NVMLError as exc:
            self._reason = f"NVML does not initialise: {exc}"

    def unavailable(self) -> str | None:
        return self._reason

    def _call(self, name: str, *args: Any) -> Any:
        """``pynvml.<name>(*args)``; its errors as :class:`NvmlError` naming the call."""
        if self._reason is not None:
            raise NvmlError(self._reason)
        call: Callable[..., Any] | None = getattr(_pynvml, name, None)
        if call is None:
            raise NvmlFunctionMissing(f"{name}: not in this pynvml")
        try:
            return call(*args)
        except _pynvml.NVMLError as exc:
            raise _nvml_error(name, exc) from None

    def _device(self, name: str, index: int, *args: Any) -> Any:
        """``pynvml.<name>(handle of GPU index, *args)``."""
        return self._call(name, self._call("nvmlDeviceGetHandleByIndex", index), *args)

    def device_count(self) -> int:
        return int(self._call("nvmlDeviceGetCount"))

    def name(self, index: int) -> str:
        return _text(self._device("nvmlDeviceGetName", index))

    def uuid(self, index: int) -> str:
        return _text(self._device("nvmlDeviceGetUUID", index))

    def pci_bus_id(self, index: int) -> str:
        return _text(self._device("nvmlDeviceGetPciInfo_v3", index).busId)

    def memory(self, index: int) -> tuple[int, int, int]:
        memory = self._device("nvmlDeviceGetMemoryInfo", index)
        return int(memory.total), int(memory.used), int(memory.free)

    def temperature_c(self, index: int) -> int:
        """The GPU's temperature through ``nvmlDeviceGetTemperatureV``; through the
        deprecated ``nvmlDeviceGetTemperature`` only where the driver lacks the first."""
        try:
            return int(self._device("nvmlDeviceGetTemperatureV", index, _NVML_TEMPERATURE_GPU))
        except NvmlFunctionMissing:
            return int(self._device("nvmlDeviceGetTemperature", index, _NVML_TEMPERATURE_GPU))

    def sm_clock_mhz(self, index: int) -> tuple[int, int]:
        return (int(self._device("nvmlDeviceGetClockInfo", index, _NVML_CLOCK_SM)),
                int(self._device("nvmlDeviceGetMaxClockInfo", index, _NVML_CLOCK_SM)))

    def ecc_volatile(self, index: int) -> tuple[int, int]:
        corrected, uncorrected = (
            int(self._device("nvmlDeviceGetTotalEccErrors", index, error_type,
                             _NVML_VOLATILE_ECC))
            for error_type in (_NVML_MEMORY_ERROR_CORRECTED, _NVML_MEMORY_ERROR_UNCORRECTED))
        return corrected, uncorrected

    def clocks_event_reasons(self, index: int) -> int:
        """``nvmlDeviceGetCurrentClocksEventReasons``; its older name
        (``...ClocksThrottleReasons``) only where the driver lacks it."""
        try:
            return int(self._device("nvmlDeviceGetCurrentClocksEventReasons", index))
        except NvmlFunctionMissing:
            return int(self._device("nvmlDeviceGetCurrentClocksThrottleReasons", index))

    def set_locked_clocks(self, index: int, min_mhz: int, max_mhz: int) -> None:
        self._device("nvmlDeviceSetGpuLockedClocks", index, min_mhz, max_mhz)

    def reset_locked_clocks(self, index: int) -> None:
        self._device("nvmlDeviceResetGpuLockedClocks", index)

    def power_limit_mw(self, index: int) -> tuple[int, int, int]:
        current = int(self._device("nvmlDeviceGetPowerManagementLimit", index))
        low, high = self._device("nvmlDeviceGetPowerManagementLimitConstraints", index)
        return current, int(low), int(high)

    def set_power_limit_mw(self, index: int, milliwatts: int) -> None:
        self._device("nvmlDeviceSetPowerManagementLimit", index, milliwatts)

    def mig_enabled(self, index: int) -> bool:
        try:
            current, _pending = self._device("nvmlDeviceGetMigMode", index)
        except NvmlNotSupported:
            return False
        return int(current) == 1

    def compute_mode(self, index: int) -> int:
        return int(self._device("nvmlDeviceGetComputeMode", index))

    def persistence_mode(self, index: int) -> bool:
        return int(self._device("nvmlDeviceGetPersistenceMode", index)) == 1

    def driver_version(self) -> str:
        return _text(self._call("nvmlSystemGetDriverVersion"))

    def cuda_driver_version(self) -> str:
        """``12.4`` for NVML's 12040 (``..._v2``, else the older unversioned call)."""
        try:
            version = int(self._call("nvmlSystemGetCudaDriverVersion_v2"))
        except NvmlFunctionMissing:
            version = int(self._call("nvmlSystemGetCudaDriverVersion"))
        return cuda_version_text(version)
