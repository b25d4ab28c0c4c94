"""Run in a subprocess with ``LD_LIBRARY_PATH`` pointing at the compiled STAND-IN
libraries (libcuda.so.1, libnvidia-ml.so.1): drives gameday's real bindings (``LibCuda``
on ctypes, ``LibNvml`` on pynvml) and the host handlers over them, and prints what it saw as
one JSON document. It runs apart from pytest so the stand-ins never load into it."""

import ctypes
import json
import tempfile
from pathlib import Path
from typing import Any

from gameday.agent.policy import Policy
from gameday.contract.backend import FaultRequest
from gameday.errors import FaultRejected
from gameday.node.host.backend import HostBackend
from gameday.node.host.cuda import CudaError, LibCuda, hold_memory
from gameday.node.host.dcgm import PyDcgm
from gameday.node.host.gpu import GpuHost, gpu_handlers
from gameday.node.host.kmsg import KernelLog
from gameday.node.host.nvml import LibNvml, NvmlNotSupported, read_gpu

GIB = 1 << 30


def exercise_dcgm(backend: HostBackend) -> dict[str, Any]:
    """With DCGM's (stand-in) bindings on the path: what the host engine was told."""
    import dcgm_agent  # the stand-in bindings' pretend host engine

    engine: dict[str, Any] = dcgm_agent.ENGINE
    seen: dict[str, Any] = {"xid_during": engine["values"].get((9, 230))}
    request = FaultRequest("gpu.fall_off_bus", {"gpu": 0}, {})
    seen["fall_off_bus"] = backend.apply("b1", request)["injected_at"]
    seen["fall_off_bus_during"] = engine["values"].get((7, 230))
    backend.revert("b1", request)
    backend.revert("x1", FaultRequest("gpu.xid", {"gpu": 1}, {}))
    seen["xid_after"] = engine["values"].get((9, 230))
    request = FaultRequest("gpu.ecc", {"gpu": 1}, {"kind": "single_bit", "count": 2})
    backend.apply("e1", request)
    seen["sbe_during"] = engine["values"].get((9, 310))
    backend.revert("e1", request)
    seen["sbe_after"] = engine["values"].get((9, 310))
    request = FaultRequest("gpu.thermal", {"gpu": 0}, {"temperature_c": 97, "clock_ratio": 0.5,
                                                       "reason": "sw_thermal"})
    backend.apply("t9", request)
    seen["thermal_during"] = [engine["values"].get((7, f)) for f in (150, 112, 100)]
    backend.revert("t9", request)
    seen["thermal_after"] = [engine["values"].get((7, f)) for f in (150, 112, 100)]
    seen["connected"] = engine["connected"]
    return seen


def main() -> None:
    seen: dict[str, Any] = {}
    cuda, nvml = LibCuda(), LibNvml()
    standin = ctypes.CDLL("libcuda.so.1")
    standin.standin_used.restype = ctypes.c_size_t
    seen["unavailable"] = [cuda.unavailable(), nvml.unavailable()]
    seen["gpus"] = [read_gpu(nvml, index).to_json() for index in range(nvml.device_count())]
    hold = hold_memory(cuda, pci_bus_id="00000000:28:00.0", ordinal=1,
                       size_bytes=3 * GIB + 1, chunk_bytes=GIB)
    seen["held"] = [hold.held_bytes, len(hold.pointers), standin.standin_used(1),
                    standin.standin_used(0), nvml.memory(1)[1]]
    seen["context_depth_while_held"] = standin.standin_depth()
    hold.release()
    seen["after_release"] = [standin.standin_used(1), standin.standin_live_contexts(),
                             standin.standin_depth()]
    try:
        hold_memory(cuda, pci_bus_id=None, ordinal=0, size_bytes=9 * GIB)
    except FaultRejected as exc:
        seen["refused"] = str(exc)
    seen["after_refusal"] = [standin.standin_used(0), standin.standin_live_contexts()]
    try:
        cuda.device("0000:99:00.0", 0)
    except CudaError as exc:
        seen["bad_device"] = str(exc)
    try:
        nvml.set_locked_clocks(1, 500, 500)
    except NvmlNotSupported as exc:
        seen["not_supported"] = str(exc)
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "kmsg"
        log.touch()
        host = GpuHost(nvml=nvml, cuda=cuda, dcgm=PyDcgm(), kmsg=KernelLog(str(log)),
                       node="standin")
        backend = HostBackend("standin", gpu_handlers(host))
        backend.use_state_dir(Path(tmp) / "state")
        backend.use_policy(Policy(kinds=frozenset(backend.capabilities()),
                                  gpu_device_settings=True))
        seen["kinds"] = dict(backend.kinds())
        seen["inventory"] = backend.inventory()["gpus"]
        oom = backend.apply("o1", FaultRequest("gpu.oom", {"gpu": 0}, {"fraction": 0.5}))
        seen["oom"] = [oom["held_bytes"], nvml.memory(0)[1]]
        backend.revert("o1", FaultRequest("gpu.oom", {"gpu": 0}, {}))
        seen["oom_reverted"] = nvml.memory(0)[1]
        params = {"clock_ratio": 0.25, "allow_device_settings": True}
        for gpu in (0, 1):
            request = FaultRequest("gpu.thermal", {"gpu": gpu}, params)
            applied = backend.apply(f"t{gpu}", request)
            during = [nvml.sm_clock_mhz(gpu)[0], nvml.power_limit_mw(gpu)[0]]
            backend.revert(f"t{gpu}", request)
            after = [nvml.sm_clock_mhz(gpu)[0], nvml.power_limit_mw(gpu)[0]]
            seen[f"thermal{gpu}"] = [applied["device_setting"], during, after]
        backend.apply("x1", FaultRequest("gpu.xid", {"gpu": 1}, {"xid": 43}))
        seen["kmsg"] = log.read_text()
        seen["dcgm_unavailable"] = host.dcgm.unavailable()
        if host.dcgm.unavailable() is None:
            seen["dcgm"] = exercise_dcgm(backend)
    print(json.dumps(seen))


if __name__ == "__main__":
    main()
