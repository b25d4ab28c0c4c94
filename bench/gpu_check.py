"""A one-shot check of the real GPU paths, for a lent GPU machine.

``/usr/bin/python3 bench/gpu_check.py [--probe-mib 512] [--deadline-s 300]``

Runs with nothing but this repository and the system Python (no venv, no package
index): NVML through ``pynvml`` (:class:`LibNvml`) where it imports, else through the
read-only ctypes reader :class:`bench.nvml_ctypes.CtypesNvml`; CUDA through ctypes
(:class:`LibCuda`). One line per step, ``check NAME ok|fail|skip FIGURES``, then one
summary line; exit 1 on any ``fail``, 0 otherwise (a machine without a GPU prints
``skip`` lines).

Steps: ``environment`` (the NVML binding, driver and CUDA driver versions,
MIG/compute/persistence modes, and a snapshot of clocks, power limit, ECC and modes);
``nvml-reads`` for every GPU; ``bus-id`` (NVML's PCI bus id -> CUDA device -> the same
GPU); ``context-cost``; ``gpu.oom`` applied and reverted through the real host handler
(:class:`GpuOomHost` over :class:`GpuHost`) on GPU 0: an impossible size refused with
nothing held, then all it may hold held (NVML's free memory drops by at least the held
bytes, another process cannot get ``--probe-mib``), then reverted (that process gets it,
used memory back within 64 MiB);
``xid-pattern`` (our Xid line against the pattern DCGM and detectors match, with NVML's
bus id); ``dcgm`` (only where DCGM's bindings import, else ``skip``); and ``snapshot``
(the clocks/power/ECC snapshot compared again).

Safety: it never calls an NVML set, reset or clear function, never opens /dev/kmsg,
never connects to a shared host engine (the DCGM step would use an embedded engine with a
private kmsg file; it is a ``skip`` until that is written), reverts every hold in
``finally``, and stops at one overall deadline (at most 6 minutes).
"""

import argparse
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # runs from a checkout

from bench.nvml_ctypes import CtypesNvml
from gameday.contract.backend import FaultRequest
from gameday.errors import FaultRejected
from gameday.node.host.cuda import OOM_MARGIN_BYTES, LibCuda
from gameday.node.host.dcgm import PyDcgm
from gameday.node.host.gpu import GpuHost, GpuOomHost
from gameday.node.host.kmsg import KernelLog, pci_for_xid, xid_line
from gameday.node.host.nvml import HAVE_PYNVML, LibNvml, Nvml, NvmlError, read_gpu

MIB = 1 << 20
MAX_DEADLINE_S = 360.0
#: The Xid pattern DCGM's kmsg reader and node problem detectors match (our own regex).
XID_PATTERN = re.compile(r"NVRM: Xid \(PCI:([0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})\): "
                         r"(\d+),")
#: CUDA_ERROR_OUT_OF_MEMORY
CUDA_OUT_OF_MEMORY = 2
#: Another process: its own context on the GPU, then an allocation of argv[2] bytes.
#: Prints ``alloc-ok``, or ``STEP-failed CUresult`` for the first call that failed.
_PROBE = """
import ctypes, sys
cuda = ctypes.CDLL("libcuda.so.1")
device, context, pointer = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_uint64()
def step(what, result):
    if result != 0:
        print(f"{what}-failed {result}")
        sys.exit(0)
step("init", cuda.cuInit(0))
step("device", cuda.cuDeviceGetByPCIBusId(ctypes.byref(device), sys.argv[1].encode()))
step("context", cuda.cuCtxCreate_v2(ctypes.byref(context), 0, device))
result = cuda.cuMemAlloc_v2(ctypes.byref(pointer), ctypes.c_size_t(int(sys.argv[2])))
if result == 0:
    cuda.cuMemFree_v2(pointer)
cuda.cuCtxDestroy_v2(context)
step("alloc", result)
print("alloc-ok")
"""


class CheckedNvml(Nvml, Protocol):
    """The NVML reads the check uses: the seam's, and the environment's."""

    def persistence_mode(self, index: int) -> bool: ...

    def driver_version(self) -> str: ...

    def cuda_driver_version(self) -> str: ...


class Checks:
    """Prints each step's line and counts fails; skips what is past the deadline."""

    def __init__(self, deadline_s: float) -> None:
        self.deadline = time.monotonic() + min(deadline_s, MAX_DEADLINE_S)
        self.counts = {"ok": 0, "fail": 0, "skip": 0}

    def report(self, name: str, outcome: str, figures: str) -> None:
        self.counts[outcome] += 1
        print(f"check {name} {outcome} {figures}", flush=True)

    def run(self, name: str, step: Callable[[], tuple[str, str]]) -> None:
        if time.monotonic() >= self.deadline:
            self.report(name, "skip", "past the overall deadline")
            return
        try:
            outcome, figures = step()
        except Exception as exc:  # a step's failure is a fail line, never a crash
            outcome, figures = "fail", f"{type(exc).__name__}: {exc}"
        self.report(name, outcome, figures)

    def left_s(self) -> float:
        return max(1.0, self.deadline - time.monotonic())


def snapshot(nvml: CheckedNvml) -> list[dict[str, Any]]:
    """Clocks, power limit, ECC totals and modes of every GPU (reads only)."""
    shots = []
    for index in range(nvml.device_count()):
        reading = read_gpu(nvml, index)
        try:
            power: int | None = nvml.power_limit_mw(index)[0]
        except NvmlError:
            power = None
        shots.append({"index": index, "max_sm_clock_mhz": reading.max_sm_clock_mhz,
                      "power_limit_mw": power, "ecc": [reading.ecc_corrected,
                                                       reading.ecc_uncorrected],
                      "mig": nvml.mig_enabled(index), "compute": nvml.compute_mode(index),
                      "persistence": nvml.persistence_mode(index)})
    return shots


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--probe-mib", type=int, default=2 * OOM_MARGIN_BYTES // MIB,
                        help="MiB another process asks for while gpu.oom holds GPU 0 (more "
                             f"than its {OOM_MARGIN_BYTES // MIB} MiB margin)")
    parser.add_argument("--deadline-s", type=float, default=300.0,
                        help=f"overall deadline (at most {MAX_DEADLINE_S:g} s)")
    args = parser.parse_args()
    if args.probe_mib * MIB <= OOM_MARGIN_BYTES:
        parser.error(f"--probe-mib must exceed gpu.oom's {OOM_MARGIN_BYTES // MIB} MiB margin")
    checks = Checks(args.deadline_s)
    nvml: CheckedNvml = LibNvml() if HAVE_PYNVML else CtypesNvml()
    binding = "pynvml" if HAVE_PYNVML else "ctypes"
    cuda = LibCuda()
    no_nvml, no_cuda = nvml.unavailable(), cuda.unavailable()
    before: list[dict[str, Any]] = []

    def environment() -> tuple[str, str]:
        nonlocal before
        if no_nvml is not None:
            return "skip", f"NVML ({binding}): {no_nvml}; CUDA: {no_cuda or 'usable'}"
        count = nvml.device_count()
        before = snapshot(nvml)
        return "ok", (f"nvml={binding} driver={nvml.driver_version()} "
                      f"cuda_driver={nvml.cuda_driver_version()} gpus={count} "
                      f"cuda={'usable' if no_cuda is None else no_cuda} snapshot={before}")

    def nvml_reads() -> tuple[str, str]:
        if no_nvml is not None:
            return "skip", no_nvml
        readings = [read_gpu(nvml, i) for i in range(nvml.device_count())]
        return "ok", " ".join(f"gpu{r.index}:{r.name}:{r.memory_free // MIB}MiB-free:"
                              f"{r.temperature_c}C" for r in readings)

    def bus_ids() -> tuple[str, str]:
        if no_nvml is not None or no_cuda is not None:
            return "skip", no_nvml or no_cuda or ""
        found = [cuda.device(nvml.pci_bus_id(i), i) for i in range(nvml.device_count())]
        return "ok", f"cuda_devices={found}"

    def context_cost() -> tuple[str, str]:
        if no_nvml is not None or no_cuda is not None:
            return "skip", no_nvml or no_cuda or ""
        free_before = nvml.memory(0)[2]
        context = cuda.create_context(cuda.device(nvml.pci_bus_id(0), 0))
        try:
            free_in, _ = cuda.mem_get_info(context)
        finally:
            cuda.destroy_context(context)
        return "ok", f"context_mib={(free_before - free_in) / MIB:.0f}"

    def other_process(pci: str) -> str:
        """What another process gets when it asks GPU ``pci`` for ``--probe-mib``."""
        probe = subprocess.run([sys.executable, "-c", _PROBE, pci, str(args.probe_mib * MIB)],
                               capture_output=True, text=True, timeout=checks.left_s())
        return probe.stdout.strip() or f"exit {probe.returncode}: {probe.stderr.strip()[-200:]}"

    def oom() -> tuple[str, str]:
        if no_nvml is not None or no_cuda is not None:
            return "skip", no_nvml or no_cuda or ""
        handler = GpuOomHost(GpuHost(nvml=nvml, cuda=cuda, dcgm=PyDcgm(),
                                     kmsg=KernelLog("/nonexistent/never-written")))
        pci = nvml.pci_bus_id(0)
        total, used_before, free_before = nvml.memory(0)
        impossible = FaultRequest("gpu.oom", {"gpu": 0}, {"size_bytes": total * 2})
        try:
            handler.apply("impossible", impossible)
            return "fail", "an impossible size was held"
        except FaultRejected:
            pass
        finally:
            handler.revert("impossible", impossible)
        used_refused = nvml.memory(0)[1]
        request = FaultRequest("gpu.oom", {"gpu": 0}, {"fraction": 1.0})
        try:
            held = handler.apply("check", request)
            free_during = nvml.memory(0)[2]
            during = other_process(pci)
        finally:
            handler.revert("check", request)
        after, used_after = other_process(pci), nvml.memory(0)[1]
        drop = free_before - free_during
        out_of_memory = (f"context-failed {CUDA_OUT_OF_MEMORY}",
                         f"alloc-failed {CUDA_OUT_OF_MEMORY}")
        good = (abs(used_refused - used_before) <= 64 * MIB and drop >= held["held_bytes"]
                and during in out_of_memory and after == "alloc-ok"
                and abs(used_after - used_before) <= 64 * MIB)
        return ("ok" if good else "fail"), (
            f"held_mib={held['held_bytes'] // MIB} context_mib={held['context_bytes'] // MIB} "
            f"free_drop_mib={drop // MIB} other_during={during!r} other_after={after!r} "
            f"refused_used_delta_mib={(used_refused - used_before) / MIB:.0f} "
            f"used_delta_mib={(used_after - used_before) / MIB:.0f}")

    def xid_pattern() -> tuple[str, str]:
        pci = nvml.pci_bus_id(0) if no_nvml is None else "00000000:18:00.0"
        line = xid_line(pci, 43, "gpu-check")
        match = XID_PATTERN.search(line)
        good = match is not None and match.group(1) == pci_for_xid(pci) and match.group(2) == "43"
        return ("ok" if good else "fail"), f"pci={pci} line={line!r}"

    def dcgm() -> tuple[str, str]:
        reason = PyDcgm(host="embedded").unavailable()
        if reason is not None:
            return "skip", reason
        return "skip", "an embedded DCGM engine with a private kmsg file is not written yet"

    def compare() -> tuple[str, str]:
        if no_nvml is not None:
            return "skip", no_nvml
        after = snapshot(nvml)
        return ("ok" if after == before else "fail"), f"before={before} after={after}"

    for name, step in (("environment", environment), ("nvml-reads", nvml_reads),
                       ("bus-id", bus_ids), ("context-cost", context_cost),
                       ("gpu.oom", oom), ("xid-pattern", xid_pattern), ("dcgm", dcgm),
                       ("snapshot", compare)):
        checks.run(name, step)
    counts = checks.counts
    print(f"gpu_check: ok={counts['ok']} fail={counts['fail']} skip={counts['skip']}")
    return 1 if counts["fail"] else 0


if __name__ == "__main__":
    sys.exit(main())
