"""Device memory through the CUDA driver API: what ``gpu.oom`` holds on a real GPU.

:class:`CudaDriver` is the seam: the handful of driver calls ``gpu.oom`` needs.
:class:`LibCuda` implements it with ctypes on ``libcuda.so.1`` (``cuInit``,
``cuDeviceGetByPCIBusId``/``cuDeviceGet``, ``cuCtxCreate``, ``cuMemGetInfo``,
``cuMemAlloc``, ``cuMemFree``), so no CUDA toolkit or Python package is needed, only the
driver. :class:`MemoryHold` is the logic: it checks the request against the free
memory *before* allocating anything, allocates in chunks, and frees everything (and
destroys its context) on release — also when an allocation fails half-way.

The agent process holds the memory: the context lives as long as the fault.
"""

import ctypes
import math
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Final, Protocol

from gameday.errors import FaultRejected

__all__ = ["CHUNK_BYTES", "OOM_MARGIN_BYTES", "CudaDriver", "CudaError", "GrowingHold",
           "LibCuda", "MemoryHold", "hold_memory"]

#: Allocations are made in chunks of at most this size (fragmentation-friendly).
CHUNK_BYTES: Final = 1 << 30
#: What ``gpu.oom`` leaves free on top of what it is asked to leave: the driver and a
#: workload's next small allocations need some room, and the last chunk must not fail.
OOM_MARGIN_BYTES: Final = 256 << 20
_LIBRARY: Final = "libcuda.so.1"


class CudaError(Exception):
    """A CUDA driver call failed: ``cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY``."""


class CudaDriver(Protocol):
    """The CUDA driver calls that hold device memory. Contexts and pointers are opaque ints."""

    def unavailable(self) -> str | None:
        """None when the driver is usable, else a one-line reason."""
        ...

    def device(self, pci_bus_id: str | None, ordinal: int) -> int:
        """The CUDA device for a PCI bus id (``0000:18:00.0``), else by ordinal."""
        ...

    def create_context(self, device: int) -> int: ...

    def destroy_context(self, context: int) -> None: ...

    def mem_get_info(self, context: int) -> tuple[int, int]:
        """``(free, total)`` bytes of the context's device."""
        ...

    def mem_alloc(self, context: int, size: int) -> int: ...

    def mem_free(self, context: int, pointer: int) -> None: ...


@dataclass
class MemoryHold:
    """Device memory held on one GPU until :meth:`release`."""

    driver: CudaDriver
    context: int
    pointers: list[int] = field(default_factory=list)
    held_bytes: int = 0
    free_before: int = 0
    total: int = 0
    #: what creating the context itself took (free memory before it, from NVML, minus
    #: the context's free memory); 0 where the free memory before was not given
    context_bytes: int = 0
    margin_bytes: int = 0

    def release(self) -> None:
        """Free every chunk and destroy the context (idempotent)."""
        while self.pointers:
            self.driver.mem_free(self.context, self.pointers.pop())
        if self.context:
            self.driver.destroy_context(self.context)
            self.context = 0
        self.held_bytes = 0


class GrowingHold:
    """Device memory on one GPU that grows by ``step_bytes`` every ``tick_s`` (a leak) up
    to ``cap_bytes``, on a timer thread, until :meth:`release`. Growth stops for good
    when an allocation fails (the GPU is full): what is held stays held."""

    def __init__(self, driver: CudaDriver, *, pci_bus_id: str | None, ordinal: int,
                 rate_bytes_per_s: int | None = None, rate_fraction_per_s: float | None = None,
                 cap_bytes: int | None = None, cap_fraction: float = 1.0,
                 tick_s: float = 0.5) -> None:
        if (rate_bytes_per_s is None) == (rate_fraction_per_s is None):
            raise FaultRejected("gpu.memory_leak: give exactly one of rate_bytes_per_s or "
                                "rate_fraction_per_s")
        try:
            context = driver.create_context(driver.device(pci_bus_id, ordinal))
        except CudaError as exc:
            raise FaultRejected(f"gpu.memory_leak: {exc}") from None
        self.hold = MemoryHold(driver, context)
        try:
            free, total = driver.mem_get_info(context)
        except CudaError as exc:
            self.hold.release()
            raise FaultRejected(f"gpu.memory_leak: {exc}") from None
        self.hold.free_before, self.hold.total = free, total
        rate = rate_bytes_per_s if rate_bytes_per_s is not None else \
            free * (rate_fraction_per_s or 0.0)
        self.step_bytes = max(1, math.floor(rate * tick_s))
        self.cap_bytes = min(free, cap_bytes if cap_bytes is not None
                             else math.floor(free * cap_fraction))
        self.tick_s = tick_s
        self.stopped_by: str | None = None  # why it stopped growing, once it has
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="gpu-leak")
        self._thread.start()

    @property
    def held_bytes(self) -> int:
        return self.hold.held_bytes

    def _run(self) -> None:
        while not self._stop.wait(self.tick_s):
            with self._lock:
                if self._stop.is_set():
                    return
                size = min(self.step_bytes, self.cap_bytes - self.hold.held_bytes)
                if size <= 0:
                    self.stopped_by = "cap"
                    return
                try:
                    self.hold.pointers.append(self.hold.driver.mem_alloc(self.hold.context,
                                                                        size))
                except CudaError as exc:
                    self.stopped_by = str(exc)
                    return
                self.hold.held_bytes += size

    def release(self) -> None:
        """Stop growing and free everything (idempotent)."""
        self._stop.set()
        with self._lock:
            self.hold.release()
        self._thread.join(timeout=5)


def hold_memory(driver: CudaDriver, *, pci_bus_id: str | None, ordinal: int,
                size_bytes: int | None = None, fraction: float | None = None,
                chunk_bytes: int = CHUNK_BYTES, margin_bytes: int = 0,
                free_before_context: int | None = None) -> MemoryHold:
    """Allocate ``size_bytes``, or ``fraction`` of the free memory, on one GPU.

    The free memory counted is the context's own view (after its creation) minus
    ``margin_bytes``. Refused (:class:`FaultRejected`, nothing held) when more is asked
    than that, or when the driver fails; a failure half-way frees what was already
    allocated. With ``free_before_context`` (NVML's free bytes just before), the
    context's own cost is in :attr:`MemoryHold.context_bytes`.
    """
    if (size_bytes is None) == (fraction is None):
        raise FaultRejected("gpu.oom: give exactly one of size_bytes or fraction")
    try:
        context = driver.create_context(driver.device(pci_bus_id, ordinal))
    except CudaError as exc:
        raise FaultRejected(f"gpu.oom: {exc}") from None
    hold = MemoryHold(driver, context)
    try:
        free, total = driver.mem_get_info(context)
        hold.free_before, hold.total, hold.margin_bytes = free, total, margin_bytes
        if free_before_context is not None:
            hold.context_bytes = max(0, free_before_context - free)
        room = max(0, free - margin_bytes)
        wanted = size_bytes if size_bytes is not None else math.floor(room * (fraction or 0))
        if wanted < 1:
            raise FaultRejected(f"gpu.oom: nothing to hold ({free} bytes free, "
                                f"{margin_bytes} kept as margin)")
        if wanted > room:
            raise FaultRejected(f"gpu.oom: cannot hold {wanted} bytes: {free} of {total} "
                                f"bytes are free after the context's own "
                                f"{hold.context_bytes} and {margin_bytes} are kept as "
                                "margin; nothing was allocated")
        while hold.held_bytes < wanted:
            size = min(chunk_bytes, wanted - hold.held_bytes)
            hold.pointers.append(driver.mem_alloc(context, size))
            hold.held_bytes += size
    except CudaError as exc:
        held = hold.held_bytes
        hold.release()
        raise FaultRejected(f"gpu.oom: {exc} after {held} bytes; freed them again") from None
    except BaseException:
        hold.release()
        raise
    return hold


class LibCuda:
    """:class:`CudaDriver` on the real ``libcuda.so.1`` through ctypes.

    Loading never raises: :meth:`unavailable` says why the driver cannot be used.
    Calls are serialised; each pushes its context onto the calling thread and pops it.
    """

    def __init__(self, library: str = _LIBRARY) -> None:
        self._lib: ctypes.CDLL | None = None
        self._reason: str | None = None
        self._lock = threading.Lock()
        try:
            self._lib = ctypes.CDLL(library)
        except OSError as exc:
            self._reason = f"no CUDA driver ({exc})"
            return
        try:
            self._call("cuInit", ctypes.c_uint(0))
        except CudaError as exc:
            self._lib, self._reason = None, f"the CUDA driver does not initialise: {exc}"

    def unavailable(self) -> str | None:
        """None when the driver is usable, else a one-line reason."""
        return self._reason

    def _call(self, name: str, *args: object) -> None:
        if self._lib is None:
            raise CudaError(self._reason or "the CUDA driver is not loaded")
        result = int(getattr(self._lib, name)(*args))
        if result != 0:
            raise CudaError(f"{name}: {self._error_name(result)}")

    def _error_name(self, code: int) -> str:
        text = ctypes.c_char_p()
        assert self._lib is not None
        if int(self._lib.cuGetErrorName(code, ctypes.byref(text))) == 0 and text.value:
            return text.value.decode()
        return f"CUresult {code}"

    @contextmanager
    def _current(self, context: int) -> Iterator[None]:
        with self._lock:
            self._call("cuCtxPushCurrent_v2", ctypes.c_void_p(context))
            try:
                yield
            finally:
                popped = ctypes.c_void_p()
                self._call("cuCtxPopCurrent_v2", ctypes.byref(popped))

    def device(self, pci_bus_id: str | None, ordinal: int) -> int:
        device = ctypes.c_int()
        with self._lock:
            if pci_bus_id:
                self._call("cuDeviceGetByPCIBusId", ctypes.byref(device),
                           ctypes.c_char_p(pci_bus_id.encode()))
            else:
                self._call("cuDeviceGet", ctypes.byref(device), ctypes.c_int(ordinal))
        return device.value

    def create_context(self, device: int) -> int:
        context = ctypes.c_void_p()
        with self._lock:
            self._call("cuCtxCreate_v2", ctypes.byref(context), ctypes.c_uint(0),
                       ctypes.c_int(device))
            popped = ctypes.c_void_p()  # cuCtxCreate made it current here; leave no trace
            self._call("cuCtxPopCurrent_v2", ctypes.byref(popped))
        return int(context.value or 0)

    def destroy_context(self, context: int) -> None:
        with self._lock:
            self._call("cuCtxDestroy_v2", ctypes.c_void_p(context))

    def mem_get_info(self, context: int) -> tuple[int, int]:
        free, total = ctypes.c_size_t(), ctypes.c_size_t()
        with self._current(context):
            self._call("cuMemGetInfo_v2", ctypes.byref(free), ctypes.byref(total))
        return free.value, total.value

    def mem_alloc(self, context: int, size: int) -> int:
        pointer = ctypes.c_uint64()
        with self._current(context):
            self._call("cuMemAlloc_v2", ctypes.byref(pointer), ctypes.c_size_t(size))
        return pointer.value

    def mem_free(self, context: int, pointer: int) -> None:
        with self._current(context):
            self._call("cuMemFree_v2", ctypes.c_uint64(pointer))
