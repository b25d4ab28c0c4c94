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
    family="GPU ECC error",
    injected_at={"lab": "virtual", "host": "telemetry"},
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
    host_sees="the counts are injected into DCGM's cache (fields 310/311, held until "
              "revert; needs DCGM's test bindings, refused without them); only "
              "`telemetry` when the dcgm-exporter the probes read shows them (its default "
              "counters leave 310/311 commented out), else `telemetry (DCGM cache only)`. "
              "The driver, NVML, the GPU's memory and the workload see nothing; "
              "`corrupt_weights` is refused. With `xid`, also a kernel-log line (see "
              "gpu.xid)",
)

GPU_OOM = FaultKind(
    name="gpu.oom",
    summary="device memory held by someone else: the GPU's free memory drops and the "
            "workload's next allocation fails with CUDA out of memory",
    module="faults.gpu",
    func="oom",
    coverage_layer="device",
    family="GPU out of memory",
    also_layers=("container",),
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
    host_sees="real device memory held by the agent's own CUDA context (`device`): "
              "NVML, DCGM and the workload all see it. The context's own cost (hundreds "
              "of MiB, more with more SMs) is measured and reported; the hold is capped "
              "at the free memory minus a 256 MiB margin, and a larger size_bytes is "
              "refused with nothing held. Refused before allocating (and the kind not "
              "advertised where no GPU allows it) with MIG enabled, in exclusive-process "
              "or prohibited compute mode, or where the agent's CUDA cannot see the GPU "
              "(CUDA_VISIBLE_DEVICES)",
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
    summary="an Xid as the NVIDIA driver reports it: a kernel-log line in the driver's "
            "format and, where DCGM runs, its Xid field",
    module="faults.gpu",
    func="xid_error",
    coverage_layer="device",
    family="GPU driver error (Xid)",
    injected_at={"lab": "virtual", "host": "log"},
    selector="gpu",
    params=(
        Param("xid", int, "the Xid (e.g. 13, 31, 43, 48, 63, 74, 79, 94, 95, 119)",
              required=True, minimum=1, maximum=999),
    ),
    seen_through="DCGM_FI_DEV_XID_ERRORS; the kernel log (dmesg, node problem detector)",
    tags=("gpu", "xid", "driver"),
    host_sees="a record written to /dev/kmsg from user space: it has facility LOG_USER, "
              "not LOG_KERN, so journald files it under the identifier NVRM (filters on "
              "the kernel identifier miss it) and rsyslog's imklog drops it by default; "
              "dmesg and log-scraping detectors see it. The driver, NVML (its Xid "
              "events, which the k8s-device-plugin watches) and the workload see nothing. "
              "Xids 79, 119 and 120 are refused as lines: DCGM from 3.3.7 reads /dev/kmsg "
              "itself whatever the facility, and 119/120 make it stop driver calls until "
              "the host engine restarts, which no revert undoes. DCGM field 230 is "
              "injected too where DCGM's test bindings are present. A line cannot be "
              "taken back",
)

GPU_THERMAL = FaultKind(
    name="gpu.thermal",
    summary="a hot GPU holding its clocks down: temperature up, SM clock down, "
            "thermal clocks-event reasons set, work slower by the clock ratio",
    module="faults.gpu",
    func="thermal_throttle",
    coverage_layer="device",
    family="GPU thermal throttling",
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
              "lowering its power limit (NVML, root; the previous limit is saved first and "
              "restored exactly); off: telemetry only", default=False),
    ),
    seen_through="DCGM_FI_DEV_GPU_TEMP, DCGM_FI_DEV_SM_CLOCK, "
                 "DCGM_FI_DEV_CLOCKS_EVENT_REASONS; higher latency",
    tags=("gpu", "thermal", "throttle", "clocks"),
    host_sees="DCGM fields 150/112/100 injected into DCGM's cache (test bindings needed); "
              "`telemetry (DCGM cache only)` unless the exporter the probes read shows "
              "them (field 112 is commented out of dcgm-exporter's default counters). "
              "With `allow_device_settings` (and the agent policy's "
              "gpu_device_settings) the GPU's power limit is really lowered "
              "(`device-settings`): the previous limit is saved in the agent's state "
              "before the change and restored exactly on revert, on agent restart and "
              "by `gameday cleanup`; refused where it cannot be read first, without root "
              "or where a previous setting is still unrestored. Clocks are never locked: "
              "NVML cannot read an existing lock back, so it could not be restored",
)

GPU_FALL_OFF_BUS = FaultKind(
    name="gpu.fall_off_bus",
    summary="the GPU falls off the bus (Xid 79): it leaves the inventory and the "
            "metrics, and the work on it fails",
    module="faults.gpu",
    func="fall_off_bus",
    coverage_layer="device",
    family="GPU lost from the bus",
    also_layers=("node",),
    injected_at={"lab": "virtual", "host": "telemetry"},
    selector="gpu",
    params=(),
    seen_through="in the lab, the GPU's dcgm-exporter series vanish; "
                 "DCGM_FI_DEV_XID_ERRORS 79",
    tags=("gpu", "xid", "pcie", "fall_off_bus"),
    host_sees="only DCGM field 230 = 79 in DCGM's cache (test bindings needed, refused "
              "without them); the GPU stays on the bus, in the inventory and in the "
              "exporter's series, and the workload keeps running. No kernel-log line: "
              "DCGM reads Xid 79 from /dev/kmsg itself and would treat the GPU as lost",
)


KINDS: tuple[FaultKind, ...] = (GPU_ECC, GPU_OOM, GPU_MEMORY_LEAK, GPU_XID, GPU_THERMAL,
                                GPU_FALL_OFF_BUS)
