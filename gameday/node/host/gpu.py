"""The real GPU fault handlers of the host backend.

=====================  ===============  ============================================
GPUs are addressed by NVML index (the agent's inventory); CUDA devices are found by
PCI bus id and DCGM's by UUID, so the three agree. Each library sits behind a Protocol
(:class:`~gameday.node.host.nvml.Nvml`, :class:`~gameday.node.host.cuda.CudaDriver`,
:class:`~gameday.node.host.dcgm.DcgmFields`, :class:`~gameday.node.host.kmsg.KernelLog`);
:func:`handlers` builds them on the real libraries, and a handler whose library is
missing says so in ``unavailable()``. A kernel-log line cannot be taken back: reverting
an Xid restores DCGM's fields; the line stays, marked ``[gameday fault ID]``.
"""

import re
import socket
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from gameday.contract.backend import FaultRequest
from gameday.errors import FaultRejected
from gameday.kinds.gpu import (
    GPU_ECC,
    GPU_FALL_OFF_BUS,
    GPU_MEMORY_LEAK,
    GPU_OOM,
    GPU_THERMAL,
    GPU_XID,
)
from gameday.node.host.base import HostFault
from gameday.node.host.cuda import (
    OOM_MARGIN_BYTES,
    CudaDriver,
    CudaError,
    GrowingHold,
    LibCuda,
    MemoryHold,
    hold_memory,
)
from gameday.node.host.dcgm import (
    CACHE_ONLY,
    FIELDS,
    DcgmError,
    DcgmFields,
    ExporterView,
    HeldInjection,
    PyDcgm,
    exporter_view_from_env,
)
from gameday.node.host.gpusettings import SavedSetting, SettingsFile
from gameday.node.host.kmsg import KernelLog, xid_line
from gameday.node.host.nvml import (
    COMPUTE_MODES_NOT_SHARED,
    LibNvml,
    Nvml,
    NvmlError,
    NvmlNoPermission,
)

__all__ = [
    "XIDS_REFUSED_AS_LINES",
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
#: Xids never written to the kernel log: DCGM (from 3.3.7) reads /dev/kmsg itself and
#: parses these whatever the record's facility; what it does then no revert undoes.
XIDS_REFUSED_AS_LINES: Final = {
    79: "DCGM would take the GPU as fallen off the bus",
    119: "DCGM takes a GSP timeout as needing a host-engine restart and stops its "
         "driver calls",
    120: "DCGM takes a GSP error as needing a host-engine restart and stops its driver "
         "calls",
}
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
    #: where device settings are saved before a change (None: settings are refused)
    settings: SettingsFile | None = None
    #: the dcgm-exporter the probes read (None: a DCGM value is cache-only)
    exporter: ExporterView | None = None

    def telemetry_layer(self, index: int, values: Mapping[int, int]) -> tuple[str, str]:
        """``("telemetry", where)`` when the exporter shows ``values`` for this GPU,
        else ``("telemetry (DCGM cache only)", why not)``."""
        if self.exporter is None:
            return CACHE_ONLY, ("no exporter to check (set $GAMEDAY_DCGM_EXPORTER_URL to the "
                                "dcgm-exporter the probes read)")
        missing = self.exporter.missing(self.nvml.uuid(index), values)
        if missing is not None:
            return CACHE_ONLY, missing
        return "telemetry", f"shown at {self.exporter.url}"

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
        if xid in XIDS_REFUSED_AS_LINES:
            raise FaultRejected(f"{kind}: Xid {xid} is never written to the kernel log on a "
                                f"host: {XIDS_REFUSED_AS_LINES[xid]}")
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
        """The Xid as DCGM field 230 (with ``fields``) and a kernel-log line; the fault's
        layer is the counts' telemetry where ``fields`` are given, else the line's."""
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
        details: dict[str, Any] = {"gpu": index, "xid": xid, "channels": channels,
                                   "kmsg_line": line,
                                   "dcgm_fields": sorted(values) if held else []}
        if line and not fields:
            details["injected_at"] = "log"
        if held is not None:
            layer, seen = self.host.telemetry_layer(index, values)
            details["telemetry"] = seen
            details.setdefault("injected_at", layer)
        return details


class _DeviceMemoryHandler(_GpuHandler):
    """What ``gpu.oom`` and ``gpu.memory_leak`` share: refused before anything is
    allocated on a GPU another process cannot share memory with this way
    (:meth:`blocker`); the kind is not advertised where no GPU allows it."""

    def unavailable(self) -> str | None:
        reason = self.host.cuda.unavailable() or self.host.nvml.unavailable()
        if reason is not None:
            return reason
        try:
            blockers = [self.blocker(index) for index in range(self.host.nvml.device_count())]
        except NvmlError as exc:
            return f"NVML cannot say whether the GPUs can be shared: {exc}"
        if blockers and all(blockers):
            return "no GPU here can be held: " + "; ".join(b for b in blockers if b)
        return None

    def blocker(self, index: int) -> str | None:
        """Why memory cannot be held on GPU ``index`` (MIG, compute mode, CUDA cannot
        see it), or None."""
        nvml = self.host.nvml
        if nvml.mig_enabled(index):
            return (f"GPU {index} has MIG enabled: a context on the whole GPU is not the "
                    "workload's instance")
        mode = nvml.compute_mode(index)
        if mode in COMPUTE_MODES_NOT_SHARED:
            return (f"GPU {index} is in {COMPUTE_MODES_NOT_SHARED[mode]} compute mode: the "
                    "agent's context would lock the workload out instead of squeezing it")
        try:
            self.host.cuda.device(nvml.pci_bus_id(index), index)
        except CudaError as exc:
            return (f"the agent's CUDA cannot see GPU {index} ({exc}; "
                    "CUDA_VISIBLE_DEVICES?)")
        return None

    def _refuse_blocked(self, index: int) -> None:
        """:class:`FaultRejected` when GPU ``index`` cannot be held (:meth:`blocker`)."""
        try:
            reason = self.blocker(index)
        except NvmlError as exc:
            raise FaultRejected(f"{self.kind}: {exc}") from None
        if reason is not None:
            raise FaultRejected(f"{self.kind}: {reason}; nothing was allocated")

    def check(self, request: FaultRequest) -> dict[str, Any]:
        """The GPU :meth:`apply` would allocate on, read-only; refused as it would be
        where the GPU cannot be held."""
        self._refuse_blocked(self.host.index(self.kind, request))
        return super().check(request)


class GpuOomHost(_DeviceMemoryHandler):
    """``gpu.oom``: device memory held by the agent through the CUDA driver API.

    Refused before anything is allocated on a GPU another process cannot share memory
    with this way (:meth:`blocker`); the kind is not advertised where no GPU allows it.
    """

    kind = "gpu.oom"
    injected_at = "device"

    def __init__(self, host: GpuHost, *, lists_inventory: bool = False,
                 margin_bytes: int = OOM_MARGIN_BYTES) -> None:
        super().__init__(host, lists_inventory=lists_inventory)
        self.margin_bytes = margin_bytes
        self._holds: dict[str, MemoryHold] = {}

    def apply(self, fault_id: str, request: FaultRequest) -> dict[str, Any]:
        params = GPU_OOM.backend_params(request.params)
        index = self.host.index(self.kind, request)
        size, fraction = params.size_bytes, params.fraction
        self._refuse_blocked(index)
        try:
            _, _, free_before = self.host.nvml.memory(index)
        except NvmlError as exc:
            raise FaultRejected(f"{self.kind}: {exc}") from None
        hold = hold_memory(self.host.cuda, pci_bus_id=self.host.nvml.pci_bus_id(index),
                           ordinal=index, size_bytes=size, fraction=fraction,
                           margin_bytes=self.margin_bytes, free_before_context=free_before)
        with self._lock:
            self._holds[fault_id] = hold
        return {"gpu": index, "held_bytes": hold.held_bytes, "free_before": hold.free_before,
                "total": hold.total, "chunks": len(hold.pointers),
                "context_bytes": hold.context_bytes, "margin_bytes": hold.margin_bytes}

    def revert(self, fault_id: str, request: FaultRequest) -> None:
        with self._lock:
            hold = self._holds.pop(fault_id, None)
        if hold is not None:
            hold.release()


class GpuMemoryLeakHost(_DeviceMemoryHandler):
    """``gpu.memory_leak``: device memory the agent allocates on a timer (CUDA driver API)."""

    kind = "gpu.memory_leak"
    injected_at = "device"

    def __init__(self, host: GpuHost) -> None:
        super().__init__(host)
        self._leaks: dict[str, GrowingHold] = {}

    def apply(self, fault_id: str, request: FaultRequest) -> dict[str, Any]:
        params = GPU_MEMORY_LEAK.backend_params(request.params)
        index = self.host.index(self.kind, request)
        self._refuse_blocked(index)
        leak = GrowingHold(self.host.cuda, pci_bus_id=self.host.nvml.pci_bus_id(index),
                           ordinal=index, rate_bytes_per_s=params.rate_bytes_per_s,
                           rate_fraction_per_s=params.rate_fraction_per_s,
                           cap_bytes=params.cap_bytes, cap_fraction=params.cap_fraction,
                           tick_s=params.tick_s)
        with self._lock:
            self._leaks[fault_id] = leak
        return {"gpu": index, "step_bytes": leak.step_bytes, "tick_s": leak.tick_s,
                "cap_bytes": leak.cap_bytes, "free_before": leak.hold.free_before,
                "total": leak.hold.total}

    def revert(self, fault_id: str, request: FaultRequest) -> None:
        with self._lock:
            leak = self._leaks.pop(fault_id, None)
        if leak is not None:
            leak.release()


class GpuXidHost(_GpuHandler):
    """``gpu.xid``: an Xid line in the kernel log (as the driver writes it, but from user
    space), and DCGM's Xid field."""

    kind = "gpu.xid"
    injected_at = "log"

    def unavailable(self) -> str | None:
        return self.host.xid_unavailable()

    def apply(self, fault_id: str, request: FaultRequest) -> dict[str, Any]:
        xid = GPU_XID.backend_params(request.params).xid
        index = self.host.index(self.kind, request)
        return self._report_xid(fault_id, index, xid)


class GpuFallOffBusHost(_GpuHandler):
    """``gpu.fall_off_bus``: DCGM's Xid field set to 79; the real GPU is never detached
    and no kernel-log line is written (:data:`XIDS_REFUSED_AS_LINES`)."""

    kind = "gpu.fall_off_bus"
    injected_at = "telemetry"

    def unavailable(self) -> str | None:
        return self.host.nvml.unavailable() or self.host.dcgm.unavailable()

    def apply(self, fault_id: str, request: FaultRequest) -> dict[str, Any]:
        GPU_FALL_OFF_BUS.backend_params(request.params)  # none: refuses any
        index = self.host.index(self.kind, request)
        values = {FIELDS["DCGM_FI_DEV_XID_ERRORS"]: XID_FALLEN_OFF_BUS}
        held = self.host.hold_fields(self.kind, index, values)
        if held is None:
            raise FaultRejected(f"{self.kind}: needs DCGM ({self.host.dcgm.unavailable()})")
        self._keep(fault_id, held)
        layer, seen = self.host.telemetry_layer(index, values)
        return {"gpu": index, "xid": XID_FALLEN_OFF_BUS, "channels": ["dcgm"],
                "kmsg_line": None, "dcgm_fields": sorted(values), "injected_at": layer,
                "telemetry": seen}


class GpuEccHost(_GpuHandler):
    """``gpu.ecc``: ECC counters in DCGM (fields 310/311) and an optional Xid."""

    kind = "gpu.ecc"
    injected_at = "telemetry"

    def unavailable(self) -> str | None:
        return self.host.xid_unavailable()

    def apply(self, fault_id: str, request: FaultRequest) -> dict[str, Any]:
        params = GPU_ECC.backend_params(request.params)
        index = self.host.index(self.kind, request)
        if params.corrupt_weights:
            raise FaultRejected(f"{self.kind}: corrupt_weights is lab-only; a real GPU's "
                                "memory is never corrupted")
        count, xid = params.count, params.xid
        fields: dict[int, int] = {}
        if count:
            reason = self.host.dcgm.unavailable()
            if reason is not None:
                raise FaultRejected(f"{self.kind}: ECC counts need DCGM ({reason}); use "
                                    "count: 0 with an xid for a kernel-log-only fault")
            name = ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL" if params.kind == "double_bit"
                    else "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL")
            try:
                gpu_id = self.host.dcgm.gpu_id(self.host.nvml.uuid(index))
                now = self.host.dcgm.latest(gpu_id, FIELDS[name]) or 0
            except DcgmError as exc:
                raise FaultRejected(f"{self.kind}: {exc}") from None
            fields[FIELDS[name]] = now + count
        if xid is not None:
            return {**self._report_xid(fault_id, index, xid, fields), "count": count}
        if not fields:
            raise FaultRejected(f"{self.kind}: nothing to inject: give count > 0 or an xid")
        held = self.host.hold_fields(self.kind, index, fields)
        self._keep(fault_id, held)
        layer, seen = self.host.telemetry_layer(index, fields)
        return {"gpu": index, "count": count, "channels": ["dcgm"],
                "dcgm_fields": sorted(fields), "injected_at": layer, "telemetry": seen}


class GpuThermalHost(_GpuHandler):
    """``gpu.thermal``: DCGM temperature/clock fields; opt-in real slowdown by a lower
    power limit (``device-settings``), saved first (:class:`SettingsFile`) and restored
    exactly on revert, also by an agent started after a crash."""

    kind = "gpu.thermal"
    injected_at = "telemetry"

    def unavailable(self) -> str | None:
        return self.host.nvml.unavailable()

    def apply(self, fault_id: str, request: FaultRequest) -> dict[str, Any]:
        params = GPU_THERMAL.backend_params(request.params)
        index = self.host.index(self.kind, request)
        device = params.allow_device_settings
        if self.host.dcgm.unavailable() is not None and not device:
            raise FaultRejected(f"{self.kind}: DCGM is not available here "
                                f"({self.host.dcgm.unavailable()}); set "
                                "allow_device_settings: true to really slow the GPU down")
        ratio = params.clock_ratio
        _, max_mhz = self._clocks(index)
        target_mhz = max(1, round(max_mhz * ratio))
        reasons = _THERMAL_REASONS[params.reason]
        temperature = round(params.temperature_c)
        values = {FIELDS["DCGM_FI_DEV_GPU_TEMP"]: temperature,
                  FIELDS["DCGM_FI_DEV_CLOCKS_EVENT_REASONS"]: reasons,
                  FIELDS["DCGM_FI_DEV_SM_CLOCK"]: target_mhz}
        held = self.host.hold_fields(self.kind, index, values)
        details: dict[str, Any] = {"gpu": index, "sm_clock_mhz": target_mhz,
                                   "max_sm_clock_mhz": max_mhz, "temperature_c": temperature,
                                   "clocks_event_reasons": reasons,
                                   "channels": ["dcgm"] if held else []}
        if device:
            try:
                details.update(self._lower_power_limit(fault_id, index, ratio))
            except FaultRejected:
                if held is not None:
                    held.release()
                raise
            details["channels"].append("nvml")
            details["injected_at"] = "device-settings"
        self._keep(fault_id, held)
        if held is not None:
            layer, seen = self.host.telemetry_layer(index, values)
            details["telemetry"] = seen
            details.setdefault("injected_at", layer)
        return details

    def _clocks(self, index: int) -> tuple[int, int]:
        try:
            return self.host.nvml.sm_clock_mhz(index)
        except NvmlError as exc:
            raise FaultRejected(f"{self.kind}: {exc}") from None

    def _lower_power_limit(self, fault_id: str, index: int, ratio: float) -> dict[str, Any]:
        """Save the GPU's power limit, then lower it by ``ratio`` (down to its minimum)."""
        settings, nvml = self.host.settings, self.host.nvml
        if settings is None:
            raise FaultRejected(f"{self.kind}: allow_device_settings needs the agent's state "
                                "directory to save the previous power limit in; this "
                                "backend has none")
        try:
            uuid = nvml.uuid(index)
            current, low, _ = nvml.power_limit_mw(index)
        except NvmlError as exc:
            raise FaultRejected(f"{self.kind}: the power limit cannot be read first, so it "
                                f"could not be restored: {exc}") from None
        pending = [i for i, saved in settings.saved().items() if saved.uuid == uuid]
        if pending:
            raise FaultRejected(f"{self.kind}: GPU {index} still has a power limit set by "
                                f"fault {pending[0]} and not yet restored; revert it first")
        target = max(low, round(current * ratio))
        settings.save(fault_id, SavedSetting(uuid=uuid, setting="power_limit_mw",
                                             previous=current, applied=target))
        try:
            nvml.set_power_limit_mw(index, target)
        except NvmlError as exc:
            settings.forget(fault_id)
            need = " (the agent must run as root)" if isinstance(exc, NvmlNoPermission) else ""
            raise FaultRejected(f"{self.kind}: the power limit cannot be set{need}: "
                                f"{exc}") from None
        return {"device_setting": "power_limit", "power_limit_mw": target,
                "previous_power_limit_mw": current}

    def revert(self, fault_id: str, request: FaultRequest) -> None:
        try:
            self._restore(fault_id)
        finally:
            super().revert(fault_id, request)

    def _restore(self, fault_id: str) -> None:
        """Put back the power limit saved for ``fault_id`` and check it reads back so;
        raises (the agent retries) while it does not."""
        settings, nvml = self.host.settings, self.host.nvml
        saved = settings.saved().get(fault_id) if settings is not None else None
        if settings is None or saved is None:
            return
        index = next((i for i in range(nvml.device_count()) if nvml.uuid(i) == saved.uuid),
                     None)
        if index is None:
            raise NvmlError(f"{self.kind}: GPU {saved.uuid} is not on this host any more; "
                            f"its power limit {saved.previous} mW is saved in "
                            f"{settings.path}")
        nvml.set_power_limit_mw(index, saved.previous)
        now, _, _ = nvml.power_limit_mw(index)
        if now != saved.previous:
            raise NvmlError(f"{self.kind}: GPU {index}'s power limit reads {now} mW after "
                            f"restoring {saved.previous} mW")
        settings.forget(fault_id)

    def use_state_dir(self, directory: Path, node: str) -> None:
        """Save device settings in ``directory`` (the agent's state directory), in a file
        named after the agent's ``node``."""
        if self.host.settings is None:
            safe = re.sub(r"[^A-Za-z0-9._-]", "_", node)
            self.host.settings = SettingsFile(directory / f"gpu-settings-{safe}.json")


def gpu_handlers(host: GpuHost) -> list[HostFault]:
    """The GPU handlers over ``host`` (the first lists the host's GPUs in the inventory)."""
    return [GpuOomHost(host, lists_inventory=True), GpuMemoryLeakHost(host), GpuXidHost(host),
            GpuEccHost(host), GpuFallOffBusHost(host), GpuThermalHost(host)]


def handlers() -> list[HostFault]:
    """The GPU handlers on this host's real NVML, CUDA driver, DCGM and ``/dev/kmsg``."""
    return gpu_handlers(GpuHost(nvml=LibNvml(), cuda=LibCuda(), dcgm=PyDcgm(),
                                kmsg=KernelLog(), exporter=exporter_view_from_env()))
