"""The real GPU fault handlers of the host backend.

=====================  ==========  ========================================================
kind                   injected_at what really happens on the host
=====================  ==========  ========================================================
``gpu.oom``            device      the agent holds device memory (CUDA driver API)
``gpu.xid``            driver      the driver's Xid line in ``/dev/kmsg``; DCGM field 230
                                   where DCGM runs
``gpu.ecc``            driver      Xid line (with ``xid``); DCGM fields 310/311 (counts,
                                   DCGM required) and 230
``gpu.fall_off_bus``   driver      Xid 79 line; DCGM field 230 = 79 (the GPU stays)
``gpu.thermal``        telemetry   DCGM fields 150 (temperature), 112 (clocks-event
                                   reasons), 100 (SM clock); with ``allow_device_settings``
                                   the GPU's clocks are really locked (NVML), or, where
                                   locking is not supported, its power limit lowered
=====================  ==========  ========================================================

GPUs are addressed by NVML index (the agent's inventory); CUDA devices are found by
PCI bus id and DCGM's by UUID, so the three agree. Each library sits behind a Protocol
(:class:`~gameday.node.host.nvml.Nvml`, :class:`~gameday.node.host.cuda.CudaDriver`,
:class:`~gameday.node.host.dcgm.DcgmFields`, :class:`~gameday.node.host.kmsg.KernelLog`);
:func:`handlers` builds them on the real libraries, and a handler whose library is
missing says so in ``unavailable()``. A kernel-log line cannot be taken back: reverting
an Xid restores DCGM's fields; the line stays, marked ``[gameday fault ID]``.
"""

import socket
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from gameday.agent.backend import FaultRequest
from gameday.errors import FaultRejected
from gameday.node.host.base import HostFault
from gameday.node.host.cuda import CudaDriver, LibCuda, MemoryHold, hold_memory
from gameday.node.host.dcgm import FIELDS, DcgmError, DcgmFields, HeldInjection, PyDcgm
from gameday.node.host.kmsg import KernelLog, xid_line
from gameday.node.host.nvml import LibNvml, Nvml, NvmlError, NvmlNotSupported

__all__ = [
    "GpuEccHost",
    "GpuFallOffBusHost",
    "GpuHost",
    "GpuOomHost",
    "GpuThermalHost",
    "GpuXidHost",
    "gpu_handlers",
    "handlers",
]

XID_FALLEN_OFF_BUS: Final = 79
_THERMAL_REASONS: Final = {"sw_thermal": 0x20, "hw_thermal": 0x20 | 0x40}


@dataclass
class GpuHost:
    """What the GPU handlers of one host share: NVML, CUDA, DCGM and the kernel log."""

    nvml: Nvml
    cuda: CudaDriver
    dcgm: DcgmFields
    kmsg: KernelLog
    node: str = field(default_factory=socket.gethostname)
    dcgm_refresh_s: float = 1.0

    def index(self, kind: str, request: FaultRequest) -> int:
        """The target GPU's NVML index (``{"gpu": i}``), which must exist."""
        index = request.target.get("gpu")
        if isinstance(index, bool) or not isinstance(index, int):
            raise FaultRejected(f"{kind}: target.gpu must be an integer GPU index, "
                                f"got {index!r}")
        count = self.nvml.device_count()
        if not 0 <= index < count:
            raise FaultRejected(f"{kind}: target.gpu {index} does not exist on {self.node} "
                                f"({count} GPUs)")
        return index

    def inventory(self) -> dict[str, list[dict[str, Any]]]:
        if self.nvml.unavailable() is not None:
            return {"gpus": []}
        gpus = []
        for index in range(self.nvml.device_count()):
            total, _, _ = self.nvml.memory(index)
            gpus.append({"index": index, "uuid": self.nvml.uuid(index),
                         "name": self.nvml.name(index), "memory_mib": total >> 20,
                         "pci_bus_id": self.nvml.pci_bus_id(index),
                         "nvlink_domain": self.node})
        return {"gpus": gpus}

    def hold_fields(self, kind: str, index: int, values: Mapping[int, int]
                    ) -> HeldInjection | None:
        """Inject ``values`` into DCGM for this GPU and hold them; None without DCGM."""
        if self.dcgm.unavailable() is not None:
            return None
        try:
            gpu_id = self.dcgm.gpu_id(self.nvml.uuid(index))
            return HeldInjection(self.dcgm, gpu_id, values, refresh_s=self.dcgm_refresh_s)
        except DcgmError as exc:
            raise FaultRejected(f"{kind}: {exc}") from None

    def log_xid(self, kind: str, index: int, xid: int, fault_id: str) -> str | None:
        """Write the Xid line to the kernel log; the line, or None without a kernel log."""
        if self.kmsg.unavailable() is not None:
            return None
        line = xid_line(self.nvml.pci_bus_id(index), xid, fault_id)
        try:
            self.kmsg.write(line)
        except OSError as exc:
            raise FaultRejected(f"{kind}: cannot write to {self.kmsg.path}: {exc}") from None
        return line

    def xid_unavailable(self) -> str | None:
        """Why no Xid can be reported here (no NVML, or neither kernel log nor DCGM)."""
        reason = self.nvml.unavailable()
        if reason is not None:
            return reason
        kmsg, dcgm = self.kmsg.unavailable(), self.dcgm.unavailable()
        if kmsg is not None and dcgm is not None:
            return f"neither the kernel log ({kmsg}) nor DCGM ({dcgm}) can be written"
        return None


class _GpuHandler:
    """Shared by the handlers: the host, held DCGM injections, and the inventory."""

    kind = ""
    injected_at = ""

    def __init__(self, host: GpuHost, *, lists_inventory: bool = False) -> None:
        self.host = host
        self.lists_inventory = lists_inventory
        self._held: dict[str, HeldInjection] = {}
        self._lock = threading.Lock()

    def inventory(self) -> dict[str, list[dict[str, Any]]]:
        return self.host.inventory() if self.lists_inventory else {}

    def check(self, request: FaultRequest) -> dict[str, Any]:
        """The GPU :meth:`apply` would target, read-only (its parameters are checked
        when it is applied)."""
        index = self.host.index(self.kind, request)
        return {"gpus": [{"index": index, "uuid": self.host.nvml.uuid(index),
                          "name": self.host.nvml.name(index)}]}

    def _keep(self, fault_id: str, held: HeldInjection | None) -> None:
        if held is not None:
            with self._lock:
                self._held[fault_id] = held

    def revert(self, fault_id: str, request: FaultRequest) -> None:
        with self._lock:
            held = self._held.pop(fault_id, None)
        if held is not None:
            held.release()

    def _report_xid(self, fault_id: str, index: int, xid: int,
                    fields: Mapping[int, int] | None = None) -> dict[str, Any]:
        values = {FIELDS["DCGM_FI_DEV_XID_ERRORS"]: xid, **(fields or {})}
        held = self.host.hold_fields(self.kind, index, values)
        try:
            line = self.host.log_xid(self.kind, index, xid, fault_id)
        except FaultRejected:
            if held is not None:
                held.release()
            raise
        self._keep(fault_id, held)
        channels = (["kmsg"] if line else []) + (["dcgm"] if held else [])
        return {"gpu": index, "xid": xid, "channels": channels, "kmsg_line": line,
                "dcgm_fields": sorted(values) if held else []}


class GpuOomHost(_GpuHandler):
    """``gpu.oom``: device memory held by the agent through the CUDA driver API."""

    kind = "gpu.oom"
    injected_at = "device"

    def __init__(self, host: GpuHost, *, lists_inventory: bool = False) -> None:
        super().__init__(host, lists_inventory=lists_inventory)
        self._holds: dict[str, MemoryHold] = {}

    def unavailable(self) -> str | None:
        return self.host.cuda.unavailable() or self.host.nvml.unavailable()

    def apply(self, fault_id: str, request: FaultRequest) -> dict[str, Any]:
        index = self.host.index(self.kind, request)
        size, fraction = request.params.get("size_bytes"), request.params.get("fraction")
        hold = hold_memory(self.host.cuda, pci_bus_id=self.host.nvml.pci_bus_id(index),
                           ordinal=index, size_bytes=size, fraction=fraction)
        with self._lock:
            self._holds[fault_id] = hold
        return {"gpu": index, "held_bytes": hold.held_bytes, "free_before": hold.free_before,
                "total": hold.total, "chunks": len(hold.pointers)}

    def revert(self, fault_id: str, request: FaultRequest) -> None:
        with self._lock:
            hold = self._holds.pop(fault_id, None)
        if hold is not None:
            hold.release()


class GpuXidHost(_GpuHandler):
    """``gpu.xid``: the driver's Xid line in the kernel log, and DCGM's Xid field."""

    kind = "gpu.xid"
    injected_at = "driver"

    def unavailable(self) -> str | None:
        return self.host.xid_unavailable()

    def apply(self, fault_id: str, request: FaultRequest) -> dict[str, Any]:
        index = self.host.index(self.kind, request)
        xid = request.params.get("xid")
        if isinstance(xid, bool) or not isinstance(xid, int) or not 1 <= xid <= 999:
            raise FaultRejected(f"{self.kind}: parameter 'xid' must be an integer 1..999, "
                                f"got {xid!r}")
        return self._report_xid(fault_id, index, xid)


class GpuFallOffBusHost(_GpuHandler):
    """``gpu.fall_off_bus``: Xid 79 reported; the real GPU is never detached."""

    kind = "gpu.fall_off_bus"
    injected_at = "driver"

    def unavailable(self) -> str | None:
        return self.host.xid_unavailable()

    def apply(self, fault_id: str, request: FaultRequest) -> dict[str, Any]:
        index = self.host.index(self.kind, request)
        return self._report_xid(fault_id, index, XID_FALLEN_OFF_BUS)


class GpuEccHost(_GpuHandler):
    """``gpu.ecc``: ECC counters in DCGM (fields 310/311) and an optional Xid."""

    kind = "gpu.ecc"
    injected_at = "driver"

    def unavailable(self) -> str | None:
        return self.host.xid_unavailable()

    def apply(self, fault_id: str, request: FaultRequest) -> dict[str, Any]:
        index = self.host.index(self.kind, request)
        params = request.params
        if params.get("corrupt_weights"):
            raise FaultRejected(f"{self.kind}: corrupt_weights is lab-only; a real GPU's "
                                "memory is never corrupted")
        count = int(params.get("count") or 0)
        xid = params.get("xid")
        fields: dict[int, int] = {}
        if count:
            reason = self.host.dcgm.unavailable()
            if reason is not None:
                raise FaultRejected(f"{self.kind}: ECC counts need DCGM ({reason}); use "
                                    "count: 0 with an xid for a kernel-log-only fault")
            name = ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL" if params.get("kind") == "double_bit"
                    else "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL")
            try:
                gpu_id = self.host.dcgm.gpu_id(self.host.nvml.uuid(index))
                now = self.host.dcgm.latest(gpu_id, FIELDS[name]) or 0
            except DcgmError as exc:
                raise FaultRejected(f"{self.kind}: {exc}") from None
            fields[FIELDS[name]] = now + count
        if xid is not None:
            return {**self._report_xid(fault_id, index, int(xid), fields), "count": count}
        held = self.host.hold_fields(self.kind, index, fields)
        self._keep(fault_id, held)
        return {"gpu": index, "count": count, "channels": ["dcgm"],
                "dcgm_fields": sorted(fields)}


@dataclass
class _Slowdown:
    """A real device setting made by ``gpu.thermal`` and how to undo it."""

    index: int
    setting: str  # "locked_clocks" | "power_limit"
    previous_power_mw: int | None = None


class GpuThermalHost(_GpuHandler):
    """``gpu.thermal``: DCGM temperature/clock fields; opt-in real clock or power slowdown."""

    kind = "gpu.thermal"
    injected_at = "telemetry"

    def __init__(self, host: GpuHost, *, lists_inventory: bool = False) -> None:
        super().__init__(host, lists_inventory=lists_inventory)
        self._slowdowns: dict[str, _Slowdown] = {}

    def unavailable(self) -> str | None:
        return self.host.nvml.unavailable()

    def apply(self, fault_id: str, request: FaultRequest) -> dict[str, Any]:
        index = self.host.index(self.kind, request)
        params = request.params
        device = params.get("allow_device_settings") is True
        if self.host.dcgm.unavailable() is not None and not device:
            raise FaultRejected(f"{self.kind}: DCGM is not available here "
                                f"({self.host.dcgm.unavailable()}); set "
                                "allow_device_settings: true to really slow the GPU down")
        ratio = float(params.get("clock_ratio", 0.5))
        if not 0 < ratio <= 1:
            raise FaultRejected(f"{self.kind}: clock_ratio must be in (0, 1], got {ratio}")
        _, max_mhz = self._clocks(index)
        target_mhz = max(1, round(max_mhz * ratio))
        reasons = _THERMAL_REASONS.get(str(params.get("reason", "hw_thermal")))
        if reasons is None:
            raise FaultRejected(f"{self.kind}: reason must be sw_thermal or hw_thermal")
        temperature = round(float(params.get("temperature_c", 92.0)))
        held = self.host.hold_fields(self.kind, index, {
            FIELDS["DCGM_FI_DEV_GPU_TEMP"]: temperature,
            FIELDS["DCGM_FI_DEV_CLOCKS_EVENT_REASONS"]: reasons,
            FIELDS["DCGM_FI_DEV_SM_CLOCK"]: target_mhz})
        details: dict[str, Any] = {"gpu": index, "sm_clock_mhz": target_mhz,
                                   "max_sm_clock_mhz": max_mhz, "temperature_c": temperature,
                                   "clocks_event_reasons": reasons,
                                   "channels": ["dcgm"] if held else []}
        if device:
            try:
                slowdown = self._slow_down(index, target_mhz, ratio)
            except FaultRejected:
                if held is not None:
                    held.release()
                raise
            with self._lock:
                self._slowdowns[fault_id] = slowdown
            details["device_setting"] = slowdown.setting
            details["channels"].append("nvml")
        self._keep(fault_id, held)
        return details

    def _clocks(self, index: int) -> tuple[int, int]:
        try:
            return self.host.nvml.sm_clock_mhz(index)
        except NvmlError as exc:
            raise FaultRejected(f"{self.kind}: {exc}") from None

    def _slow_down(self, index: int, target_mhz: int, ratio: float) -> _Slowdown:
        nvml = self.host.nvml
        try:
            nvml.set_locked_clocks(index, target_mhz, target_mhz)
            return _Slowdown(index, "locked_clocks")
        except NvmlNotSupported:
            pass
        except NvmlError as exc:
            raise FaultRejected(f"{self.kind}: {exc}") from None
        try:
            current, low, _ = nvml.power_limit_mw(index)
            nvml.set_power_limit_mw(index, max(low, round(current * ratio)))
        except NvmlError as exc:
            raise FaultRejected(f"{self.kind}: neither locked clocks nor a power limit can "
                                f"be set: {exc}") from None
        return _Slowdown(index, "power_limit", previous_power_mw=current)

    def revert(self, fault_id: str, request: FaultRequest) -> None:
        with self._lock:
            slowdown = self._slowdowns.pop(fault_id, None)
        try:
            if slowdown is not None and slowdown.setting == "locked_clocks":
                self.host.nvml.reset_locked_clocks(slowdown.index)
            elif slowdown is not None and slowdown.previous_power_mw is not None:
                self.host.nvml.set_power_limit_mw(slowdown.index, slowdown.previous_power_mw)
        finally:
            super().revert(fault_id, request)


def gpu_handlers(host: GpuHost) -> list[HostFault]:
    """The GPU handlers over ``host`` (the first lists the host's GPUs in the inventory)."""
    return [GpuOomHost(host, lists_inventory=True), GpuXidHost(host), GpuEccHost(host),
            GpuFallOffBusHost(host), GpuThermalHost(host)]


def handlers() -> list[HostFault]:
    """The GPU handlers on this host's real NVML, CUDA driver, DCGM and ``/dev/kmsg``."""
    return gpu_handlers(GpuHost(nvml=LibNvml(), cuda=LibCuda(), dcgm=PyDcgm(),
                                kmsg=KernelLog()))
