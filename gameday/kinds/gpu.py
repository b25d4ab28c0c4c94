"""GPU fault kinds: ECC errors, held and leaking device memory, Xids, heat, a lost GPU."""

from dataclasses import dataclass
from typing import Literal

from gameday.errors import InvalidInput
from gameday.kinds.params import param, required
from gameday.kinds.selectors import Selector, SelectorKey
from gameday.kinds.spec import KindParams, KindSpec

__all__ = ["GPU_ECC", "GPU_FALL_OFF_BUS", "GPU_MEMORY_LEAK", "GPU_OOM", "GPU_SELECTOR",
           "GPU_THERMAL", "GPU_XID", "KINDS", "EccParams", "FallOffBusParams",
           "MemoryLeakParams", "OomParams", "ThermalParams", "XidParams"]

#: Xids an ECC fault may report with its errors.
ECC_XIDS = (48, 63, 64, 94, 95)

GPU_SELECTOR = Selector(
    argument="gpu",
    doc="which GPU: {holding_shard: N} | {node: NAME, index: N} | {uuid: GPU-...}; on "
        "Kubernetes also node_labels, nvlink_domain, percent (of the matches) and seed, "
        "and a list where one value is taken",
    keys=(SelectorKey("holding_shard", (int, list), "the GPU that holds this shard"),
          SelectorKey("uuid", (str, list), "the GPU with this UUID"),
          SelectorKey("node", (str, list), "the GPUs of this node"),
          SelectorKey("index", (int, list), "the GPU with this index on its node"),
          SelectorKey("node_labels", (dict,), "the GPUs of nodes with these labels",
                      labels=True),
          SelectorKey("nvlink_domain", (str, int, list), "the GPUs of this NVLink domain"),
          SelectorKey("percent", (float,), "this percentage of the matching GPUs"),
          SelectorKey("seed", (int,), "the seed of the draw that percent makes")),
    nullable=False)


def _one_of(path: str, kind: str, given: dict[str, object]) -> None:
    named = [name for name, value in given.items() if value is not None]
    if len(named) != 1:
        raise InvalidInput(f"{kind} needs exactly one of {' or '.join(given)}, got "
                           + (" and ".join(named) or "neither"), path=path)


@dataclass(frozen=True, kw_only=True)
class EccParams(KindParams):
    """``gpu.ecc``'s parameters."""

    rules = "with count 0, corrupt_weights or an xid"

    kind: Literal["single_bit", "double_bit"] = param("single_bit or double_bit",
                                                      default="double_bit")
    count: int = param("errors added to the volatile ECC counter", default=1, minimum=0,
                       maximum=1_000_000)
    xid: int | None = param("Xid reported with the errors (48 = double-bit ECC)",
                            default=None, choices=ECC_XIDS)
    corrupt_weights: bool = param("silently corrupt the weights held on the GPU",
                                  default=False)

    def check(self, path: str) -> None:
        if self.count == 0 and not self.corrupt_weights and self.xid is None:
            raise InvalidInput("gpu.ecc with count 0 needs corrupt_weights or an xid",
                               path=f"{path}.count")


@dataclass(frozen=True, kw_only=True)
class OomParams(KindParams):
    """``gpu.oom``'s parameters."""

    rules = "exactly one of size_bytes or fraction"

    size_bytes: int | None = param("bytes to hold (give this or fraction)", default=None,
                                   minimum=1)
    fraction: float | None = param("fraction of the GPU's free memory to hold, in (0, 1] "
                                   "(give this or size_bytes)", default=None, minimum=0.0,
                                   maximum=1.0, exclusive_minimum=True)

    def check(self, path: str) -> None:
        _one_of(path, "gpu.oom", {"size_bytes": self.size_bytes, "fraction": self.fraction})


@dataclass(frozen=True, kw_only=True)
class MemoryLeakParams(KindParams):
    """``gpu.memory_leak``'s parameters."""

    rules = "exactly one of rate_bytes_per_s or rate_fraction_per_s"

    rate_bytes_per_s: int | None = param("bytes leaked per second (give this or "
                                         "rate_fraction_per_s)", default=None, minimum=1)
    rate_fraction_per_s: float | None = param(
        "fraction of the GPU's free memory at the start leaked per second, in (0, 1] (give "
        "this or rate_bytes_per_s)", default=None, minimum=0.0, maximum=1.0,
        exclusive_minimum=True)
    cap_bytes: int | None = param("stop growing once this much is held (default: the cap "
                                  "fraction)", default=None, minimum=1)
    cap_fraction: float = param("stop growing once this fraction of the free memory at the "
                                "start is held, in (0, 1]", default=1.0, minimum=0.0,
                                maximum=1.0, exclusive_minimum=True)
    tick_s: float = param("how often the held memory grows", default=0.5, minimum=0.05,
                          maximum=60.0)

    def check(self, path: str) -> None:
        _one_of(path, "gpu.memory_leak", {"rate_bytes_per_s": self.rate_bytes_per_s,
                                          "rate_fraction_per_s": self.rate_fraction_per_s})


@dataclass(frozen=True, kw_only=True)
class XidParams(KindParams):
    """``gpu.xid``'s parameters."""

    xid: int = required("the Xid (e.g. 13, 31, 43, 48, 63, 74, 79, 94, 95, 119)", minimum=1,
                        maximum=999)


@dataclass(frozen=True, kw_only=True)
class ThermalParams(KindParams):
    """``gpu.thermal``'s parameters."""

    temperature_c: float = param("GPU temperature reported while throttled", default=92.0,
                                 minimum=30.0, maximum=120.0)
    clock_ratio: float = param("SM clock as a fraction of its maximum, in (0, 1]",
                               default=0.5, minimum=0.0, maximum=1.0, exclusive_minimum=True)
    reason: Literal["sw_thermal", "hw_thermal"] = param(
        "sw_thermal (clocks-event bit 0x20) or hw_thermal (0x20 | 0x40)",
        default="hw_thermal")
    allow_device_settings: bool = param(
        "host only: really slow the GPU down by lowering its power limit (NVML, root; the "
        "previous limit is saved first and restored exactly); off: telemetry only",
        default=False)


@dataclass(frozen=True, kw_only=True)
class FallOffBusParams(KindParams):
    """``gpu.fall_off_bus`` takes no parameters."""


GPU_ECC = KindSpec(
    name="gpu.ecc",
    summary="ECC errors on a GPU: single- or double-bit counts, an Xid, optional silent "
            "corruption of the weights it holds",
    module="faults.gpu",
    func="ecc_error",
    coverage_layer="device",
    family="GPU ECC error",
    injected_at={"lab": "virtual", "host": "telemetry"},
    selects=GPU_SELECTOR,
    params_type=EccParams,
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

GPU_OOM = KindSpec(
    name="gpu.oom",
    summary="device memory held by someone else: the GPU's free memory drops and the "
            "workload's next allocation fails with CUDA out of memory",
    module="faults.gpu",
    func="oom",
    coverage_layer="device",
    family="GPU out of memory",
    also_layers=("container",),
    injected_at={"lab": "virtual", "host": "device"},
    selects=GPU_SELECTOR,
    params_type=OomParams,
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

GPU_MEMORY_LEAK = KindSpec(
    name="gpu.memory_leak",
    summary="device memory held by someone else grows at a rate up to a cap: the GPU's "
            "free memory falls until the workload's next allocation fails",
    module="faults.gpu",
    func="memory_leak",
    coverage_layer="device",
    injected_at={"lab": "virtual", "host": "device"},
    selects=GPU_SELECTOR,
    params_type=MemoryLeakParams,
    seen_through="DCGM_FI_DEV_FB_USED rising, DCGM_FI_DEV_FB_FREE falling; the "
                 "workload's allocations fail (CUDA out of memory) once it crosses",
    tags=("gpu", "memory", "leak", "oom", "hbm"),
)

GPU_XID = KindSpec(
    name="gpu.xid",
    summary="an Xid as the NVIDIA driver reports it: a kernel-log line in the driver's "
            "format and, where DCGM runs, its Xid field",
    module="faults.gpu",
    func="xid_error",
    coverage_layer="device",
    family="GPU driver error (Xid)",
    injected_at={"lab": "virtual", "host": "log"},
    selects=GPU_SELECTOR,
    params_type=XidParams,
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

GPU_THERMAL = KindSpec(
    name="gpu.thermal",
    summary="a hot GPU holding its clocks down: temperature up, SM clock down, "
            "thermal clocks-event reasons set, work slower by the clock ratio",
    module="faults.gpu",
    func="thermal_throttle",
    coverage_layer="device",
    family="GPU thermal throttling",
    injected_at={"lab": "virtual", "host": "telemetry"},
    selects=GPU_SELECTOR,
    params_type=ThermalParams,
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

GPU_FALL_OFF_BUS = KindSpec(
    name="gpu.fall_off_bus",
    summary="the GPU falls off the bus (Xid 79): it leaves the inventory and the "
            "metrics, and the work on it fails",
    module="faults.gpu",
    func="fall_off_bus",
    coverage_layer="device",
    family="GPU lost from the bus",
    also_layers=("node",),
    injected_at={"lab": "virtual", "host": "telemetry"},
    selects=GPU_SELECTOR,
    params_type=FallOffBusParams,
    seen_through="in the lab, the GPU's dcgm-exporter series vanish; "
                 "DCGM_FI_DEV_XID_ERRORS 79",
    tags=("gpu", "xid", "pcie", "fall_off_bus"),
    host_sees="only DCGM field 230 = 79 in DCGM's cache (test bindings needed, refused "
              "without them); the GPU stays on the bus, in the inventory and in the "
              "exporter's series, and the workload keeps running. No kernel-log line: "
              "DCGM reads Xid 79 from /dev/kmsg itself and would treat the GPU as lost",
)

KINDS: tuple[KindSpec[KindParams], ...] = (GPU_ECC, GPU_OOM, GPU_MEMORY_LEAK, GPU_XID,
                                           GPU_THERMAL, GPU_FALL_OFF_BUS)
