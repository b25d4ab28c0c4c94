"""The real GPU fault handlers (``gameday.node.host.gpu``) and their libraries.

This machine has no GPU, no NVIDIA driver and no DCGM, so the CUDA driver, NVML and
DCGM are STAND-INS here (``StandInCuda``, ``StandInNvml``, ``StandInDcgm``: small
in-memory models of the calls behind each Protocol). What is real: the kernel-log
writer writes real records to a temporary file standing in for ``/dev/kmsg`` (never
the real one), the DCGM hold runs its real refresh thread, and the real ctypes
libraries are loaded and report why they are unavailable. ``bench/gpu_check.py`` runs
the real CUDA and NVML code on a GPU machine.
"""

import http.server
import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pynvml
import pytest

from gameday.agent.policy import Policy
from gameday.agent.registry import FaultRegistry
from gameday.contract.backend import FaultRequest
from gameday.errors import FaultRejected
from gameday.node.host.backend import HostBackend, host_backend
from gameday.node.host.cuda import OOM_MARGIN_BYTES, CudaError, LibCuda, hold_memory
from gameday.node.host.dcgm import (
    CACHE_ONLY,
    EXPORTER_NAMES,
    FIELDS,
    ExporterView,
    HeldInjection,
    PyDcgm,
)
from gameday.node.host.gpu import XIDS_REFUSED_AS_LINES, GpuHost, gpu_handlers
from gameday.node.host.kmsg import KernelLog, pci_for_xid, xid_line
from gameday.node.host.nvml import (
    LibNvml,
    NvmlDeprecated,
    NvmlError,
    NvmlFunctionMissing,
    NvmlNoPermission,
    NvmlNotSupported,
    _nvml_error,
    read_gpu,
)

GIB = 1 << 30
#: How node problem detector and DCGM recognise a driver Xid line.
XID_PATTERN = re.compile(r"NVRM: Xid \(PCI:([0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2})\): (\d+),")


@dataclass
class StandInCuda:
    """Stand-in for the CUDA driver: per-device free memory, contexts and allocations."""

    free: dict[int, int] = field(default_factory=lambda: {0: 80 * GIB, 1: 80 * GIB})
    total: int = 80 * GIB
    fail_after: int | None = None  # allocations that succeed before one fails
    reason: str | None = None
    contexts: dict[int, int] = field(default_factory=dict)  # context -> device
    allocations: dict[int, tuple[int, int]] = field(default_factory=dict)  # ptr -> (ctx, size)
    devices_by_pci: dict[str, int] = field(default_factory=lambda: {
        "0000:18:00.0": 0, "0000:28:00.0": 1})
    context_cost: int = 0  # what a context takes of its device's memory
    _next: int = 0x1000

    def unavailable(self) -> str | None:
        return self.reason

    def device(self, pci_bus_id: str | None, ordinal: int) -> int:
        if pci_bus_id is None:
            return ordinal
        key = pci_for_xid(pci_bus_id) + ".0"
        if key not in self.devices_by_pci:
            raise CudaError("cuDeviceGetByPCIBusId: CUDA_ERROR_INVALID_VALUE")
        return self.devices_by_pci[key]

    def create_context(self, device: int) -> int:
        self._next += 1
        self.contexts[self._next] = device
        self.free[device] -= self.context_cost
        return self._next

    def destroy_context(self, context: int) -> None:
        assert not any(c == context for c, _ in self.allocations.values()), "leaked memory"
        self.free[self.contexts.pop(context)] += self.context_cost

    def mem_get_info(self, context: int) -> tuple[int, int]:
        return self.free[self.contexts[context]], self.total

    def mem_alloc(self, context: int, size: int) -> int:
        if self.fail_after is not None and len(self.allocations) >= self.fail_after:
            raise CudaError("cuMemAlloc_v2: CUDA_ERROR_OUT_OF_MEMORY")
        device = self.contexts[context]
        assert size <= self.free[device]
        self.free[device] -= size
        self._next += 1
        self.allocations[self._next] = (context, size)
        return self._next

    def mem_free(self, context: int, pointer: int) -> None:
        owner, size = self.allocations.pop(pointer)
        assert owner == context
        self.free[self.contexts[context]] += size


@dataclass
class StandInNvml:
    """Stand-in for NVML: two H100s with settable clocks and power limits."""

    reason: str | None = None
    locked_clocks_supported: bool = True
    locked: dict[int, tuple[int, int]] = field(default_factory=dict)
    power_mw: dict[int, int] = field(default_factory=lambda: {0: 700_000, 1: 700_000})
    calls: list[str] = field(default_factory=list)
    cuda: StandInCuda | None = None  # its device memory, where given
    mig: set[int] = field(default_factory=set)
    compute_modes: dict[int, int] = field(default_factory=dict)
    power_readable: bool = True
    root: bool = True

    def unavailable(self) -> str | None:
        return self.reason

    def device_count(self) -> int:
        return 2

    def name(self, index: int) -> str:
        return "NVIDIA H100 80GB HBM3"

    def uuid(self, index: int) -> str:
        return f"GPU-0000000{index}-1111-2222-3333-444444444444"

    def pci_bus_id(self, index: int) -> str:
        return f"00000000:{0x18 + 0x10 * index:02X}:00.0"

    def memory(self, index: int) -> tuple[int, int, int]:
        if self.cuda is not None:
            free = self.cuda.free[index]
            return self.cuda.total, self.cuda.total - free, free
        return 80 * GIB, GIB, 79 * GIB

    def temperature_c(self, index: int) -> int:
        return 35

    def sm_clock_mhz(self, index: int) -> tuple[int, int]:
        return self.locked.get(index, (1980, 1980))[1], 1980

    def ecc_volatile(self, index: int) -> tuple[int, int]:
        raise NvmlNotSupported("nvmlDeviceGetTotalEccErrors: Not Supported")

    def clocks_event_reasons(self, index: int) -> int:
        return 0

    def set_locked_clocks(self, index: int, min_mhz: int, max_mhz: int) -> None:
        self.calls.append(f"set_locked_clocks({index}, {min_mhz}, {max_mhz})")
        if not self.locked_clocks_supported:
            raise NvmlNotSupported("nvmlDeviceSetGpuLockedClocks: Not Supported")
        self.locked[index] = (min_mhz, max_mhz)

    def reset_locked_clocks(self, index: int) -> None:
        self.calls.append(f"reset_locked_clocks({index})")
        self.locked.pop(index, None)

    def power_limit_mw(self, index: int) -> tuple[int, int, int]:
        if not self.power_readable:
            raise NvmlNotSupported("nvmlDeviceGetPowerManagementLimit: Not Supported")
        return self.power_mw[index], 200_000, 700_000

    def set_power_limit_mw(self, index: int, milliwatts: int) -> None:
        self.calls.append(f"set_power_limit_mw({index}, {milliwatts})")
        if not self.root:
            raise NvmlNoPermission("nvmlDeviceSetPowerManagementLimit: Insufficient "
                                   "Permissions")
        self.power_mw[index] = milliwatts

    def mig_enabled(self, index: int) -> bool:
        return index in self.mig

    def compute_mode(self, index: int) -> int:
        return self.compute_modes.get(index, 0)


@dataclass
class StandInDcgm:
    """Stand-in for DCGM's host engine: field values per (gpu id, field id)."""

    reason: str | None = None
    values: dict[tuple[int, int], int] = field(default_factory=dict)
    injections: list[tuple[int, int, int]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def unavailable(self) -> str | None:
        return self.reason

    def gpu_id(self, uuid: str) -> int:
        return 10 + int(uuid[4:12])  # DCGM's ids need not be NVML's indexes

    def latest(self, gpu_id: int, field_id: int) -> int | None:
        with self.lock:
            return self.values.get((gpu_id, field_id))

    def inject(self, gpu_id: int, field_id: int, value: int) -> None:
        with self.lock:
            self.values[(gpu_id, field_id)] = value
            self.injections.append((gpu_id, field_id, value))


@dataclass
class Host:
    backend: HostBackend
    cuda: StandInCuda
    nvml: StandInNvml
    dcgm: StandInDcgm
    kmsg: Path

    def lines(self) -> list[str]:
        return self.kmsg.read_text().splitlines() if self.kmsg.exists() else []


def make_host(tmp_path: Path, *, dcgm: bool = True, kmsg: bool = True,
              cuda: bool = True, nvml: StandInNvml | None = None,
              exporter: ExporterView | None = None) -> Host:
    """A host backend over the stand-ins, saving device settings in ``tmp_path/state``;
    ``nvml`` is the GPUs' NVML (give the same one again for the same GPUs after an agent
    restart)."""
    log = tmp_path / "kmsg"
    if kmsg:
        log.touch()
    device = StandInCuda(reason=None if cuda else "no CUDA driver (stand-in)")
    stand_ins = (device, nvml or StandInNvml(cuda=device),
                 StandInDcgm(reason=None if dcgm else "no DCGM (stand-in)"))
    host = GpuHost(nvml=stand_ins[1], cuda=stand_ins[0], dcgm=stand_ins[2],
                   kmsg=KernelLog(str(log)), node="gpu-host", dcgm_refresh_s=0.02,
                   exporter=exporter)
    backend = HostBackend("gpu-host", gpu_handlers(host))
    backend.use_state_dir(tmp_path / "state")
    backend.use_policy(Policy(kinds=frozenset(backend.capabilities()),
                              gpu_device_settings=True))
    return Host(backend, *stand_ins, log)


def request(fault_kind: str, gpu: int = 1, **params: object) -> FaultRequest:
    return FaultRequest(fault_kind, {"gpu": gpu}, params)


# -- CUDA memory hold ---------------------------------------------------------------------


def test_hold_memory_by_fraction_and_by_bytes_then_release_frees_it() -> None:
    cuda = StandInCuda()
    hold = hold_memory(cuda, pci_bus_id="00000000:18:00.0", ordinal=0, fraction=0.5)
    assert hold.held_bytes == 40 * GIB and cuda.free[0] == 40 * GIB
    assert len(hold.pointers) == 40  # 1 GiB chunks
    other = hold_memory(cuda, pci_bus_id=None, ordinal=1, size_bytes=3 * GIB + 5)
    assert cuda.free[1] == 77 * GIB - 5 and len(other.pointers) == 4
    hold.release()
    hold.release()  # idempotent
    other.release()
    assert cuda.free == {0: 80 * GIB, 1: 80 * GIB} and cuda.contexts == {}


def test_asking_for_more_than_is_free_is_refused_before_anything_is_held() -> None:
    cuda = StandInCuda()
    with pytest.raises(FaultRejected, match=r"85899345920 of .* free .* nothing was"):
        hold_memory(cuda, pci_bus_id=None, ordinal=0, size_bytes=81 * GIB)
    assert cuda.allocations == {} and cuda.contexts == {} and cuda.free[0] == 80 * GIB


def test_a_failed_allocation_half_way_frees_what_was_held() -> None:
    cuda = StandInCuda(fail_after=3)
    with pytest.raises(FaultRejected, match="CUDA_ERROR_OUT_OF_MEMORY after 3221225472"):
        hold_memory(cuda, pci_bus_id=None, ordinal=0, size_bytes=10 * GIB)
    assert cuda.allocations == {} and cuda.contexts == {} and cuda.free[0] == 80 * GIB


def test_gpu_oom_through_the_host_backend(tmp_path: Path) -> None:
    host = make_host(tmp_path)
    assert host.backend.kinds()["gpu.oom"] == "device"
    applied = host.backend.apply("f1", request("gpu.oom", 1, size_bytes=None, fraction=0.25))
    assert applied["held_bytes"] == (80 * GIB - OOM_MARGIN_BYTES) // 4
    assert host.cuda.free[1] == 80 * GIB - applied["held_bytes"]
    assert host.cuda.free[0] == 80 * GIB  # GPU 1 by PCI bus id, not GPU 0
    host.backend.revert("f1", request("gpu.oom"))
    host.backend.revert("f1", request("gpu.oom"))
    assert host.cuda.free[1] == 80 * GIB and host.cuda.contexts == {}
    with pytest.raises(FaultRejected, match=r"target\.gpu 7 does not exist on gpu-host"):
        host.backend.apply("f2", request("gpu.oom", 7, fraction=0.5))


def test_gpu_oom_is_unavailable_without_a_cuda_driver(tmp_path: Path) -> None:
    host = make_host(tmp_path, cuda=False)
    assert host.backend.capabilities()["gpu.oom"] == "no CUDA driver (stand-in)"
    with pytest.raises(FaultRejected, match=r"gpu\.oom cannot be applied on this host: no CUDA"):
        host.backend.apply("f1", request("gpu.oom", fraction=0.5))


BLOCKED = [
    pytest.param(lambda nvml, cuda: nvml.mig.add(1), "GPU 1 has MIG enabled", id="mig"),
    pytest.param(lambda nvml, cuda: nvml.compute_modes.update({1: 3}),
                 "GPU 1 is in exclusive-process compute mode", id="exclusive-process"),
    pytest.param(lambda nvml, cuda: nvml.compute_modes.update({1: 2}),
                 "GPU 1 is in prohibited compute mode", id="prohibited"),
    # CUDA_VISIBLE_DEVICES=0: the agent's CUDA finds no device at GPU 1's PCI bus id
    pytest.param(lambda nvml, cuda: cuda.devices_by_pci.pop("0000:28:00.0"),
                 r"the agent's CUDA cannot see GPU 1 .*CUDA_VISIBLE_DEVICES", id="invisible"),
]


HOLDERS = [pytest.param("gpu.oom", {"fraction": 0.5}, id="oom"),
           pytest.param("gpu.memory_leak", {"rate_fraction_per_s": 0.01, "tick_s": 0.05},
                        id="memory_leak")]


@pytest.mark.parametrize(("kind", "params"), HOLDERS)
@pytest.mark.parametrize(("block", "why"), BLOCKED)
def test_device_memory_is_refused_on_a_gpu_it_cannot_share_before_allocating(
        tmp_path: Path, block: Callable[[StandInNvml, StandInCuda], object], why: str,
        kind: str, params: dict[str, object]) -> None:
    """Stand-in NVML and CUDA: one GPU of two blocked; gpu.oom and gpu.memory_leak are
    still offered (GPU 0 can be held), the blocked GPU is refused by the check and the
    apply, and nothing is allocated there (no context, no allocation)."""
    host = make_host(tmp_path)
    block(host.nvml, host.cuda)
    backend = HostBackend("gpu-host", gpu_handlers(GpuHost(
        nvml=host.nvml, cuda=host.cuda, dcgm=host.dcgm, kmsg=KernelLog(str(host.kmsg)),
        node="gpu-host")))
    backend.use_policy(Policy(kinds=frozenset({kind})))
    assert backend.kinds()[kind] == "device"
    pattern = f"{kind.replace('.', '[.]')}: {why}.*; nothing was allocated"
    with pytest.raises(FaultRejected, match=pattern):
        backend.check(request(kind, 1, **params))
    with pytest.raises(FaultRejected, match=pattern):
        backend.apply("o1", request(kind, 1, **params))
    assert host.cuda.contexts == {} and host.cuda.allocations == {}
    assert host.cuda.free == {0: 80 * GIB, 1: 80 * GIB}
    assert backend.check(request(kind, 0, **params))["gpus"][0]["index"] == 0


def test_gpu_oom_is_not_advertised_when_every_gpu_is_blocked(tmp_path: Path) -> None:
    """Stand-in NVML: GPU 0 with MIG on, GPU 1 exclusive-process: the kind is missing
    from kinds(), the inventory says why (both reasons), and an apply is refused."""
    nvml = StandInNvml(mig={0}, compute_modes={1: 3})
    host = make_host(tmp_path, nvml=nvml)
    nvml.cuda = host.cuda
    assert "gpu.oom" not in host.backend.kinds()
    reason = host.backend.inventory()["unavailable"]["gpu.oom"]
    assert reason.startswith("no GPU here can be held: GPU 0 has MIG enabled")
    assert "GPU 1 is in exclusive-process compute mode" in reason
    assert [g["index"] for g in host.backend.inventory()["gpus"]] == [0, 1]  # still listed
    with pytest.raises(FaultRejected, match=r"gpu\.oom cannot be applied on this host: no GPU"):
        host.backend.apply("o1", request("gpu.oom", 0, fraction=0.5))
    assert host.cuda.contexts == {} and host.cuda.allocations == {}


def test_gpu_oom_holds_at_most_free_memory_less_the_margin_counting_the_context(
        tmp_path: Path) -> None:
    """Stand-in CUDA whose context takes 300 MiB: fraction 1.0 holds what the context
    sees free less the margin, leaving exactly the margin; one byte more is refused with
    nothing held; the context's cost is reported."""
    host = make_host(tmp_path)
    host.cuda.context_cost = 300 << 20
    applied = host.backend.apply("o1", request("gpu.oom", 0, fraction=1.0))
    assert applied["context_bytes"] == 300 << 20 and applied["margin_bytes"] == OOM_MARGIN_BYTES
    assert applied["free_before"] == 80 * GIB - (300 << 20)
    assert applied["held_bytes"] == 80 * GIB - (300 << 20) - OOM_MARGIN_BYTES
    assert host.cuda.free[0] == OOM_MARGIN_BYTES
    host.backend.revert("o1", request("gpu.oom"))
    assert host.cuda.free[0] == 80 * GIB and host.cuda.contexts == {}
    room = 80 * GIB - (300 << 20) - OOM_MARGIN_BYTES
    with pytest.raises(FaultRejected, match=(
            rf"cannot hold {room + 1} bytes: .* after the context's own {300 << 20} and "
            rf"{OOM_MARGIN_BYTES} are kept as margin; nothing was allocated")):
        host.backend.apply("o2", request("gpu.oom", 0, size_bytes=room + 1))
    assert host.cuda.allocations == {} and host.cuda.contexts == {}
    exact = host.backend.apply("o3", request("gpu.oom", 0, size_bytes=room))
    assert exact["held_bytes"] == room and host.cuda.free[0] == OOM_MARGIN_BYTES
    host.backend.revert("o3", request("gpu.oom"))


# -- Xid: kernel log and DCGM -------------------------------------------------------------


def test_xid_line_is_in_the_drivers_format() -> None:
    line = xid_line("00000000:3B:00.0", 48, "abc123")
    match = XID_PATTERN.search(line)
    assert match is not None and match.groups() == ("0000:3b:00", "48")
    assert "double bit error" in line and line.endswith("[gameday fault abc123]")
    assert pci_for_xid("0000:B3:00.0") == "0000:b3:00"
    with pytest.raises(ValueError, match="not a PCI bus id"):
        pci_for_xid("nonsense")


def test_gpu_xid_writes_the_kernel_log_and_holds_dcgm_xid_field(tmp_path: Path) -> None:
    host = make_host(tmp_path)
    applied = host.backend.apply("x1", request("gpu.xid", 1, xid=43))
    assert applied["channels"] == ["kmsg", "dcgm"]
    [line] = host.lines()
    assert line.startswith("<3>NVRM: Xid (PCI:0000:28:00): 43, ")
    assert host.dcgm.latest(11, FIELDS["DCGM_FI_DEV_XID_ERRORS"]) == 43
    host.dcgm.inject(11, 230, 0)  # DCGM samples the real GPU: the hold puts it back
    deadline = time.monotonic() + 5
    while host.dcgm.latest(11, 230) != 43 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert host.dcgm.latest(11, 230) == 43
    host.backend.revert("x1", request("gpu.xid"))
    assert host.dcgm.latest(11, 230) == 0
    count = len(host.dcgm.injections)
    time.sleep(0.1)
    assert len(host.dcgm.injections) == count  # no longer refreshed
    assert [t.name for t in threading.enumerate() if t.name.startswith("dcgm-hold")] == []


def test_gpu_xid_without_dcgm_writes_only_the_kernel_log(tmp_path: Path) -> None:
    host = make_host(tmp_path, dcgm=False)
    assert host.backend.kinds()["gpu.xid"] == "log"
    applied = host.backend.apply("x1", request("gpu.xid", 0, xid=13))
    assert applied["channels"] == ["kmsg"] and applied["dcgm_fields"] == []
    assert applied["injected_at"] == "log"
    assert "Warp Exception" in host.lines()[0] and host.dcgm.injections == []
    with pytest.raises(FaultRejected, match=r"params\.xid: must be >= 1"):
        host.backend.apply("x2", request("gpu.xid", 0, xid=0))


def test_xid_kinds_are_unavailable_without_kernel_log_and_dcgm(tmp_path: Path) -> None:
    host = make_host(tmp_path, dcgm=False, kmsg=False)
    reason = host.backend.capabilities()["gpu.xid"]
    assert reason is not None and "neither the kernel log" in reason and "kmsg" in reason
    assert host.backend.capabilities()["gpu.fall_off_bus"] == "no DCGM (stand-in)"


@pytest.mark.parametrize("xid", sorted(XIDS_REFUSED_AS_LINES))
def test_xids_the_real_dcgm_reacts_to_are_never_written_to_the_kernel_log(
        tmp_path: Path, xid: int) -> None:
    host = make_host(tmp_path)
    with pytest.raises(FaultRejected, match=f"Xid {xid} is never written to the kernel log"):
        host.backend.apply("x1", request("gpu.xid", 0, xid=xid))
    assert host.lines() == [] and host.dcgm.latest(10, 230) == 0  # the hold was released


def test_fall_off_bus_is_dcgm_only_and_leaves_the_gpu_alone(tmp_path: Path) -> None:
    host = make_host(tmp_path)
    assert host.backend.kinds()["gpu.fall_off_bus"] == "telemetry"
    applied = host.backend.apply("b1", request("gpu.fall_off_bus", 0))
    assert applied["xid"] == 79 and applied["channels"] == ["dcgm"]
    assert applied["injected_at"] == CACHE_ONLY  # no exporter is watched here
    assert host.lines() == [] and host.dcgm.latest(10, 230) == 79
    assert host.backend.inventory()["gpus"][0]["pci_bus_id"] == "00000000:18:00.0"
    host.backend.revert("b1", request("gpu.fall_off_bus"))
    assert host.dcgm.latest(10, 230) == 0


class StandInExporter:
    """A real HTTP server on loopback answering ``/metrics`` in dcgm-exporter's text
    format, from a STAND-IN DCGM's values (``connected``: as an exporter reading the
    host engine the agent injects into, ``-r HOST:5555``) or from none (an exporter on
    its own embedded engine, which never sees an injection)."""

    def __init__(self, dcgm: StandInDcgm, nvml: StandInNvml, *, connected: bool) -> None:
        source = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = source.text().encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_: object) -> None:
                pass

        self.dcgm, self.nvml, self.connected = dcgm, nvml, connected
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/metrics"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def text(self) -> str:
        lines = []
        for field_id, name in sorted(EXPORTER_NAMES.items()):
            lines += [f"# HELP {name} field {field_id}", f"# TYPE {name} gauge"]
            for index in range(self.nvml.device_count()):
                uuid = self.nvml.uuid(index)
                value = self.dcgm.latest(self.dcgm.gpu_id(uuid), field_id) \
                    if self.connected else None
                lines.append(f'{name}{{gpu="{index}",UUID="{uuid}",pci_bus_id='
                             f'"{self.nvml.pci_bus_id(index)}",device="nvidia{index}",'
                             f'modelName="{self.nvml.name(index)}",Hostname="gpu-host"}} '
                             f"{value or 0}")
        return "\n".join(lines) + "\n"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


@pytest.mark.parametrize(("connected", "layer"), [(True, "telemetry"), (False, CACHE_ONLY)])
def test_the_layer_is_telemetry_only_where_the_probes_exporter_shows_the_value(
        tmp_path: Path, connected: bool, layer: str) -> None:
    """ExporterView against a real loopback server (StandInExporter): the injected Xid 79
    on GPU 1's UUID is read back there -> ``telemetry``; an exporter that shows 0 ->
    ``telemetry (DCGM cache only)``, naming what was not shown and where."""
    exporter = StandInExporter(StandInDcgm(), StandInNvml(), connected=connected)
    try:
        host = make_host(tmp_path, exporter=ExporterView(exporter.url, wait_s=0.3,
                                                         poll_s=0.05))
        exporter.dcgm, exporter.nvml = host.dcgm, host.nvml  # this host's engine and GPUs
        nvml = host.nvml
        applied = host.backend.apply("b1", request("gpu.fall_off_bus", 1))
        assert applied["injected_at"] == layer
        if connected:
            assert applied["telemetry"] == f"shown at {exporter.url}"
        else:
            assert applied["telemetry"] == (
                f"DCGM_FI_DEV_XID_ERRORS=79 not shown for {nvml.uuid(1)} at {exporter.url} "
                "within 0.3 s")
        host.backend.revert("b1", request("gpu.fall_off_bus"))
        assert 'DCGM_FI_DEV_XID_ERRORS{gpu="1"' in exporter.text()
    finally:
        exporter.close()


def test_gpu_ecc_adds_to_dcgm_counters_and_reports_the_xid(tmp_path: Path) -> None:
    host = make_host(tmp_path)
    dbe = FIELDS["DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"]
    host.dcgm.inject(11, dbe, 2)
    applied = host.backend.apply("e1", request("gpu.ecc", 1, kind="double_bit", count=3,
                                               xid=48, corrupt_weights=False))
    assert applied["channels"] == ["kmsg", "dcgm"] and applied["count"] == 3
    assert applied["injected_at"] == CACHE_ONLY
    assert host.dcgm.latest(11, dbe) == 5 and host.dcgm.latest(11, 230) == 48
    assert "(PCI:0000:28:00): 48," in host.lines()[0]
    host.backend.revert("e1", request("gpu.ecc"))
    assert host.dcgm.latest(11, dbe) == 2 and host.dcgm.latest(11, 230) == 0


def test_gpu_ecc_refuses_what_a_real_host_cannot_do(tmp_path: Path) -> None:
    host = make_host(tmp_path, dcgm=False)
    with pytest.raises(FaultRejected, match="corrupt_weights is lab-only"):
        host.backend.apply("e1", request("gpu.ecc", 0, count=0, corrupt_weights=True))
    with pytest.raises(FaultRejected, match="ECC counts need DCGM"):
        host.backend.apply("e2", request("gpu.ecc", 0, kind="single_bit", count=1))
    assert host.lines() == []
    applied = host.backend.apply("e3", request("gpu.ecc", 0, count=0, xid=94))
    assert applied["channels"] == ["kmsg"] and "Contained" in host.lines()[0]


# -- thermal ------------------------------------------------------------------------------


def test_thermal_injects_dcgm_fields_and_touches_no_device_setting(tmp_path: Path) -> None:
    host = make_host(tmp_path)
    assert host.backend.kinds()["gpu.thermal"] == "telemetry"
    applied = host.backend.apply("t1", request("gpu.thermal", 1, temperature_c=95.0,
                                               clock_ratio=0.25, reason="hw_thermal",
                                               allow_device_settings=False))
    assert applied["sm_clock_mhz"] == 495 and applied["channels"] == ["dcgm"]
    assert host.dcgm.latest(11, 150) == 95 and host.dcgm.latest(11, 112) == 0x60
    assert host.dcgm.latest(11, 100) == 495
    assert host.nvml.calls == []
    host.backend.revert("t1", request("gpu.thermal"))
    assert host.dcgm.latest(11, 112) == 0


def test_thermal_without_dcgm_needs_allow_device_settings(tmp_path: Path) -> None:
    host = make_host(tmp_path, dcgm=False)
    with pytest.raises(FaultRejected, match="allow_device_settings: true"):
        host.backend.apply("t1", request("gpu.thermal", 0, clock_ratio=0.5))
    assert host.nvml.calls == []


def test_thermal_device_settings_save_then_lower_the_power_limit_and_restore_it_exactly(
        tmp_path: Path) -> None:
    host = make_host(tmp_path, dcgm=False)
    host.nvml.power_mw[0] = 650_000  # an administrator's own earlier limit, not the default
    applied = host.backend.apply("t1", request("gpu.thermal", 0, clock_ratio=0.5,
                                               allow_device_settings=True))
    assert applied["device_setting"] == "power_limit" and applied["channels"] == ["nvml"]
    assert applied["injected_at"] == "device-settings"
    assert applied["previous_power_limit_mw"] == 650_000 and host.nvml.power_mw[0] == 325_000
    saved = json.loads((tmp_path / "state" / "gpu-settings-gpu-host.json").read_text())
    assert saved["settings"]["t1"]["previous"] == 650_000
    host.backend.revert("t1", request("gpu.thermal"))
    host.backend.revert("t1", request("gpu.thermal"))
    assert host.nvml.power_mw[0] == 650_000 and host.nvml.locked == {}
    assert host.nvml.calls == ["set_power_limit_mw(0, 325000)", "set_power_limit_mw(0, 650000)"]
    assert json.loads((tmp_path / "state" / "gpu-settings-gpu-host.json").read_text()) == {
        "version": 1, "settings": {}}


def test_thermal_device_settings_are_refused_where_they_cannot_be_kept_safe(
        tmp_path: Path) -> None:
    host = make_host(tmp_path, dcgm=False)
    host.nvml.power_readable = False
    with pytest.raises(FaultRejected, match="cannot be read first"):
        host.backend.apply("t1", request("gpu.thermal", 0, allow_device_settings=True))
    host.nvml.power_readable, host.nvml.root = True, False
    with pytest.raises(FaultRejected, match=r"cannot be set \(the agent must run as root\)"):
        host.backend.apply("t2", request("gpu.thermal", 0, allow_device_settings=True))
    assert host.nvml.power_mw[0] == 700_000
    host.nvml.root = True
    host.backend.apply("t3", request("gpu.thermal", 1, clock_ratio=0.1,
                                     allow_device_settings=True))
    assert host.nvml.power_mw[1] == 200_000  # clamped to the device's minimum
    with pytest.raises(FaultRejected, match="still has a power limit set by fault t3"):
        host.backend.apply("t4", request("gpu.thermal", 1, allow_device_settings=True))
    bare = GpuHost(nvml=StandInNvml(), cuda=StandInCuda(), dcgm=StandInDcgm(),
                   kmsg=KernelLog(str(tmp_path / "kmsg")), node="n")
    [thermal] = [h for h in gpu_handlers(bare) if h.kind == "gpu.thermal"]
    with pytest.raises(FaultRejected, match="needs the agent's state directory"):
        thermal.apply("t5", request("gpu.thermal", 0, allow_device_settings=True))


def test_a_power_limit_is_restored_by_an_agent_restarted_between_apply_and_revert(
        tmp_path: Path) -> None:
    """A real registry and state file; the agent 'crashes' (never closes) after apply,
    and a new one, over the same GPUs (the same stand-in NVML), restores the limit."""
    gpus = StandInNvml()
    gpus.power_mw[1] = 600_000
    policy = Policy(kinds=frozenset({"gpu.thermal"}), gpu_device_settings=True)
    first = make_host(tmp_path, dcgm=False, nvml=gpus)
    first.backend.use_policy(policy)
    registry = FaultRegistry(first.backend, state_path=tmp_path / "state" / "agent.json",
                             node="gpu-host")
    fault = registry.apply(request("gpu.thermal", 1, clock_ratio=0.5,
                                   allow_device_settings=True), lease_s=60)
    assert fault.injected_at == "device-settings" and gpus.power_mw[1] == 300_000
    registry.release()  # the process dies: nothing reverted
    assert gpus.power_mw[1] == 300_000
    second = make_host(tmp_path, dcgm=False, nvml=gpus)
    restarted = FaultRegistry(second.backend, state_path=tmp_path / "state" / "agent.json",
                              node="gpu-host")
    [recovered] = restarted.recovered
    assert recovered.id == fault.id and recovered.revert_reason == "agent-restart"
    assert gpus.power_mw[1] == 600_000  # exactly the earlier limit, not the default
    restarted.close()


# -- the real libraries on this machine ---------------------------------------------------


def test_the_real_libraries_say_why_they_are_unavailable_here(tmp_path: Path) -> None:
    cuda, nvml, dcgm = LibCuda(), LibNvml(), PyDcgm()
    if cuda.unavailable() is None or nvml.unavailable() is None:
        pytest.skip("this machine has an NVIDIA driver; bench/gpu_check.py exercises it")
    assert "libcuda.so.1" in (cuda.unavailable() or "")
    assert "libnvidia-ml.so.1" in (nvml.unavailable() or "")
    assert "DCGM" in (dcgm.unavailable() or "")
    with pytest.raises(NvmlError, match="no NVIDIA driver"):
        nvml.device_count()
    with pytest.raises(CudaError, match="no CUDA driver"):
        cuda.device(None, 0)
    assert KernelLog(str(tmp_path / "absent")).unavailable() is not None
    backend = host_backend("here")
    gpu_kinds = {k: r for k, r in backend.capabilities().items() if k.startswith("gpu.")}
    assert set(gpu_kinds) == {"gpu.oom", "gpu.memory_leak", "gpu.xid", "gpu.ecc",
                              "gpu.fall_off_bus", "gpu.thermal"}
    assert all(reason for reason in gpu_kinds.values())
    assert backend.inventory()["gpus"] == []
    with pytest.raises(FaultRejected, match="cannot be applied on this host"):
        backend.apply("x", request("gpu.xid", 0, xid=48))


@pytest.mark.parametrize(("code", "meaning", "text"), [
    (pynvml.NVML_ERROR_NOT_SUPPORTED, NvmlNotSupported, "Not Supported"),
    (pynvml.NVML_ERROR_FUNCTION_NOT_FOUND, NvmlFunctionMissing, "Function Not Found"),
    (pynvml.NVML_ERROR_DEPRECATED, NvmlDeprecated, ""),
    (pynvml.NVML_ERROR_NO_PERMISSION, NvmlNoPermission, "Insufficient Permissions"),
    (pynvml.NVML_ERROR_GPU_IS_LOST, NvmlError, "GPU is lost"),
])
def test_pynvml_errors_keep_their_meaning(code: int, meaning: type[NvmlError],
                                          text: str) -> None:
    """pynvml's own exception classes (made from NVML return codes, no library needed)."""
    error = _nvml_error("nvmlDeviceSetGpuLockedClocks", pynvml.NVMLError(code))
    assert type(error) is meaning
    assert str(error).startswith("nvmlDeviceSetGpuLockedClocks: " + text)
    assert isinstance(error, NvmlNotSupported) == (meaning in (
        NvmlNotSupported, NvmlFunctionMissing, NvmlDeprecated))


def test_read_gpu_reads_everything_and_tolerates_unsupported_fields() -> None:
    reading = read_gpu(StandInNvml(), 1)
    assert reading.pci_bus_id == "00000000:28:00.0" and reading.max_sm_clock_mhz == 1980
    assert reading.ecc_corrected is None and reading.memory_free == 79 * GIB


def test_held_injection_restores_zero_where_dcgm_had_no_value() -> None:
    dcgm = StandInDcgm()
    held = HeldInjection(dcgm, 3, {150: 99}, refresh_s=0)
    assert dcgm.latest(3, 150) == 99
    held.release()
    held.release()
    assert dcgm.latest(3, 150) == 0 and len(dcgm.injections) == 2


def test_gpu_memory_leak_allocates_on_a_timer_up_to_its_cap(tmp_path: Path) -> None:
    """Stand-in CUDA driver (no GPU here): the agent's timer allocates a step every tick
    until the cap, and reverting frees every allocation and the context."""
    host = make_host(tmp_path)
    assert host.backend.kinds()["gpu.memory_leak"] == "device"
    leak = request("gpu.memory_leak", 1, rate_bytes_per_s=4 * GIB, rate_fraction_per_s=None,
                   cap_bytes=5 * GIB, cap_fraction=1.0, tick_s=0.05)
    applied = host.backend.apply("leak-1", leak)
    assert applied["step_bytes"] == GIB // 5 and applied["cap_bytes"] == 5 * GIB
    deadline = time.monotonic() + 20
    levels = []
    while host.cuda.free[1] > 75 * GIB:
        assert time.monotonic() < deadline, levels[-3:]
        levels.append(host.cuda.free[1])
        time.sleep(0.02)
    time.sleep(0.3)
    assert host.cuda.free[1] == 75 * GIB  # capped
    assert len(set(levels)) > 3 and host.cuda.free[0] == 80 * GIB  # grew in steps, GPU 1
    host.backend.revert("leak-1", leak)
    host.backend.revert("leak-1", leak)
    assert host.cuda.free[1] == 80 * GIB and host.cuda.contexts == {}
    with pytest.raises(FaultRejected, match="exactly one of rate_bytes_per_s"):
        host.backend.apply("leak-2", request("gpu.memory_leak", 1))


def test_gpu_memory_leak_stops_growing_when_the_gpu_is_full(tmp_path: Path) -> None:
    host = make_host(tmp_path)
    host.cuda.fail_after = 2
    leak = request("gpu.memory_leak", 0, rate_fraction_per_s=0.01, tick_s=0.05)
    host.backend.apply("leak-1", leak)
    deadline = time.monotonic() + 20
    while len(host.cuda.allocations) < 2:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    time.sleep(0.3)
    assert len(host.cuda.allocations) == 2  # the failed allocation ended the growth
    host.backend.revert("leak-1", leak)
    assert host.cuda.free[0] == 80 * GIB and host.cuda.contexts == {}
