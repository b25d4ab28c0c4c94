"""GPU fault kinds."""

from faults.base import FaultKind, Param

GPU_SELECTOR_DOC = ("which GPU: {holding_shard: N} | {node: NAME, index: N} | {uuid: GPU-...}")

GPU_ECC = FaultKind(
    name="gpu.ecc",
    summary="ECC errors on a GPU: single- or double-bit counts, an Xid, optional silent "
            "corruption of the weights it holds",
    module="faults.gpu",
    func="ecc_error",
    coverage_layer="device",
    injected_at={"lab": "virtual", "host": "driver"},
    selector="gpu",
    params=(
        Param("kind", str, "single_bit or double_bit", default="double_bit",
              choices=("single_bit", "double_bit")),
        Param("count", int, "errors added to the volatile ECC counter", default=1,
              minimum=0, maximum=1_000_000),
        Param("xid", int, "Xid reported with the errors (48 = double-bit ECC)", default=None,
              choices=(48, 63, 64, 94, 95), nullable=True),
        Param("corrupt_weights", bool, "silently corrupt the weights held on the GPU",
              default=False),
    ),
    seen_through="DCGM_FI_DEV_ECC_SBE_VOL_TOTAL, DCGM_FI_DEV_ECC_DBE_VOL_TOTAL, "
                 "DCGM_FI_DEV_XID_ERRORS; wrong answers when weights are corrupted",
    tags=("gpu", "ecc", "xid", "hbm"),
)

GPU_OOM = FaultKind(
    name="gpu.oom",
    summary="device memory held by someone else: the GPU's free memory drops and the "
            "workload's next allocation fails with CUDA out of memory",
    module="faults.gpu",
    func="oom",
    coverage_layer="device",
    injected_at={"lab": "virtual", "host": "device"},
    selector="gpu",
    params=(
        Param("size_bytes", int, "bytes to hold (give this or fraction)", default=None,
              minimum=1, nullable=True),
        Param("fraction", float, "fraction of the GPU's free memory to hold, in (0, 1] "
              "(give this or size_bytes)", default=None, minimum=0.0, maximum=1.0,
              nullable=True),
    ),
    seen_through="DCGM_FI_DEV_FB_USED up, DCGM_FI_DEV_FB_FREE down; the workload's "
                 "allocations fail (CUDA out of memory) and it exits",
    tags=("gpu", "oom", "memory", "hbm"),
)

GPU_MEMORY_LEAK = FaultKind(
    name="gpu.memory_leak",
    summary="device memory held by someone else grows at a rate up to a cap: the GPU's "
            "free memory falls until the workload's next allocation fails",
    module="faults.gpu",
    func="memory_leak",
    coverage_layer="device",
    injected_at={"lab": "virtual", "host": "device"},
    selector="gpu",
    params=(
        Param("rate_bytes_per_s", int, "bytes leaked per second (give this or "
              "rate_fraction_per_s)", default=None, minimum=1, nullable=True),
        Param("rate_fraction_per_s", float, "fraction of the GPU's free memory at the "
              "start leaked per second, in (0, 1] (give this or rate_bytes_per_s)",
              default=None, minimum=0.0, maximum=1.0, nullable=True),
        Param("cap_bytes", int, "stop growing once this much is held (default: the cap "
              "fraction)", default=None, minimum=1, nullable=True),
        Param("cap_fraction", float, "stop growing once this fraction of the free memory "
              "at the start is held, in (0, 1]", default=1.0, minimum=0.0, maximum=1.0),
        Param("tick_s", float, "how often the held memory grows", default=0.5,
              minimum=0.05, maximum=60.0),
    ),
    seen_through="DCGM_FI_DEV_FB_USED rising, DCGM_FI_DEV_FB_FREE falling; the "
                 "workload's allocations fail (CUDA out of memory) once it crosses",
    tags=("gpu", "memory", "leak", "oom", "hbm"),
)

GPU_XID = FaultKind(
    name="gpu.xid",
    summary="an Xid reported by the NVIDIA driver: a kernel-log line in the driver's "
            "format and, where DCGM runs, its Xid field",
    module="faults.gpu",
    func="xid_error",
    coverage_layer="device",
    injected_at={"lab": "virtual", "host": "driver"},
    selector="gpu",
    params=(
        Param("xid", int, "the Xid (e.g. 13, 31, 43, 48, 63, 74, 79, 94, 95, 119)",
              required=True, minimum=1, maximum=999),
    ),
    seen_through="DCGM_FI_DEV_XID_ERRORS; the kernel log (dmesg, node problem detector)",
    tags=("gpu", "xid", "driver"),
)

GPU_THERMAL = FaultKind(
    name="gpu.thermal",
    summary="a hot GPU holding its clocks down: temperature up, SM clock down, "
            "thermal clocks-event reasons set, work slower by the clock ratio",
    module="faults.gpu",
    func="thermal_throttle",
    coverage_layer="device",
    injected_at={"lab": "virtual", "host": "telemetry"},
    selector="gpu",
    params=(
        Param("temperature_c", float, "GPU temperature reported while throttled",
              default=92.0, minimum=30.0, maximum=120.0),
        Param("clock_ratio", float, "SM clock as a fraction of its maximum, in (0, 1]",
              default=0.5, minimum=0.0, maximum=1.0),
        Param("reason", str, "sw_thermal (clocks-event bit 0x20) or hw_thermal "
              "(0x20 | 0x40)", default="hw_thermal", choices=("sw_thermal", "hw_thermal")),
        Param("allow_device_settings", bool, "host only: really slow the GPU down by "
              "locking its clocks (NVML; reset on revert); off: telemetry only",
              default=False),
    ),
    seen_through="DCGM_FI_DEV_GPU_TEMP, DCGM_FI_DEV_SM_CLOCK, "
                 "DCGM_FI_DEV_CLOCKS_EVENT_REASONS; higher latency",
    tags=("gpu", "thermal", "throttle", "clocks"),
)

GPU_FALL_OFF_BUS = FaultKind(
    name="gpu.fall_off_bus",
    summary="the GPU falls off the bus (Xid 79): it leaves the inventory and the "
            "metrics, and the work on it fails",
    module="faults.gpu",
    func="fall_off_bus",
    coverage_layer="device",
    injected_at={"lab": "virtual", "host": "driver"},
    selector="gpu",
    params=(),
    seen_through="the GPU's dcgm-exporter series vanish; DCGM_FI_DEV_XID_ERRORS 79; the "
                 "kernel log",
    tags=("gpu", "xid", "pcie", "fall_off_bus"),
)


KINDS: tuple[FaultKind, ...] = (GPU_ECC, GPU_OOM, GPU_MEMORY_LEAK, GPU_XID, GPU_THERMAL,
                                GPU_FALL_OFF_BUS)
