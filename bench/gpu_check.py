"""A read-and-allocate check of the real GPU backends, for a machine with NVIDIA GPUs.

``python bench/gpu_check.py [--mib 256]``

Reads every GPU through NVML (count, name, UUID, PCI bus id, memory, temperature, SM
clock, volatile ECC totals, clocks-event reasons) and exercises the real ``gpu.oom``
backend: holds ``--mib`` MiB on each GPU through the CUDA driver API, reads the used
memory back through NVML, frees it and reads again. It prints what it saw; the figure
is ``held_ratio``: the rise in NVML's used memory divided by what was held (about 1;
the context's own overhead makes it a little more).

It only reads and allocates: it NEVER changes clocks, power limits, ECC or MIG settings.
Without an NVIDIA driver, or without ``pynvml`` (it runs on a bare system Python too), it
says so and exits 0. Last line:
``gpu_check: gpus=N status=ok|no-driver|no-pynvml|no-cuda|error held_ratio=...``.
"""

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # runs from a checkout

from gameday.errors import FaultRejected
from gameday.node.host.cuda import LibCuda, hold_memory
from gameday.node.host.nvml import HAVE_PYNVML, LibNvml, NvmlError, read_gpu

MIB = 1 << 20


def describe(reading: dict[str, Any]) -> str:
    def mib(value: int) -> str:
        return f"{value // MIB} MiB"

    ecc = ("n/a" if reading["ecc_uncorrected"] is None else
           f"{reading['ecc_corrected']} corrected / {reading['ecc_uncorrected']} uncorrected")
    reasons = reading["clocks_event_reasons"]
    return (f"gpu {reading['index']}: {reading['name']} {reading['uuid']} "
            f"pci {reading['pci_bus_id']}\n"
            f"  memory {mib(reading['memory_used'])} used / {mib(reading['memory_free'])} "
            f"free / {mib(reading['memory_total'])} total\n"
            f"  temperature {reading['temperature_c']} C, SM clock "
            f"{reading['sm_clock_mhz']}/{reading['max_sm_clock_mhz']} MHz, clocks-event "
            f"reasons {'n/a' if reasons is None else hex(reasons)}, ECC volatile {ecc}")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mib", type=int, default=256, help="MiB to hold on each GPU")
    args = parser.parse_args()
    nvml = LibNvml()
    reason = nvml.unavailable()
    if not HAVE_PYNVML:
        print(f"skip: NVML not reachable from this Python: {reason}")
        print("gpu_check: gpus=0 status=no-pynvml")
        return 0
    if reason is not None:
        print(f"no NVIDIA GPU or driver present: {reason}")
        print("gpu_check: gpus=0 status=no-driver")
        return 0
    try:
        count = nvml.device_count()
        readings = [read_gpu(nvml, index) for index in range(count)]
    except NvmlError as exc:
        print(f"NVML read failed: {exc}")
        print("gpu_check: gpus=0 status=error")
        return 1
    for reading in readings:
        print(describe(reading.to_json()))
    cuda = LibCuda()
    reason = cuda.unavailable()
    if reason is not None:
        print(f"CUDA driver unusable: {reason}")
        print(f"gpu_check: gpus={count} status=no-cuda")
        return 0
    ratios = []
    for reading in readings:
        used_before = nvml.memory(reading.index)[1]
        try:
            hold = hold_memory(cuda, pci_bus_id=reading.pci_bus_id, ordinal=reading.index,
                               size_bytes=args.mib * MIB)
        except FaultRejected as exc:
            print(f"gpu {reading.index}: gpu.oom refused: {exc}")
            print(f"gpu_check: gpus={count} status=error")
            return 1
        used_during, chunks = nvml.memory(reading.index)[1], len(hold.pointers)
        hold.release()
        used_after = nvml.memory(reading.index)[1]
        ratio = (used_during - used_before) / (args.mib * MIB)
        ratios.append(ratio)
        print(f"gpu {reading.index}: held {args.mib} MiB in {chunks} chunk(s); NVML used "
              f"{used_before // MIB} -> {used_during // MIB} -> {used_after // MIB} MiB "
              f"(held_ratio {ratio:.3f}; after release {used_after - used_before:+d} bytes)")
    worst = max(ratios, key=lambda r: abs(r - 1.0))
    print(f"gpu_check: gpus={count} status=ok held_ratio={worst:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
