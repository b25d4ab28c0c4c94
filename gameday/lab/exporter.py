"""A dcgm-exporter look-alike: the text a node serves at ``/metrics``.

Metric names, types, help texts and label names follow NVIDIA dcgm-exporter
(``gpu``, ``UUID``, ``pci_bus_id``, ``device``, ``modelName``, ``Hostname``), so the same
alert rules and dashboards work against the lab and a real cluster. A GPU that is not
present (fell off the bus) is not exported, as with the real exporter.
"""

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

from gameday.lab.gpustate import GpuState

__all__ = ["CONTENT_TYPE", "DCGM_METRICS", "DcgmMetric", "render_dcgm"]

CONTENT_TYPE: Final = "text/plain; version=0.0.4; charset=utf-8"


@dataclass(frozen=True)
class DcgmMetric:
    name: str
    type: str
    help: str
    value: Callable[[GpuState], float]


DCGM_METRICS: Final[tuple[DcgmMetric, ...]] = (
    DcgmMetric("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz).",
               lambda g: g.sm_clock_mhz),
    DcgmMetric("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).",
               lambda g: g.temperature_c),
    DcgmMetric("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "gauge",
               "Current clock event reasons (bitmask of DCGM_CLOCKS_EVENT_REASON_*).",
               lambda g: g.clock_event_reasons),
    DcgmMetric("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).",
               lambda g: g.memory_total_mib - g.memory_used_mib),
    DcgmMetric("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).",
               lambda g: g.memory_used_mib),
    DcgmMetric("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered.",
               lambda g: g.last_xid),
    DcgmMetric("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "counter",
               "Total number of single-bit volatile ECC errors.", lambda g: g.ecc_sbe_total),
    DcgmMetric("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "counter",
               "Total number of double-bit volatile ECC errors.", lambda g: g.ecc_dbe_total),
)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(gpu: GpuState) -> str:
    pairs = (("gpu", str(gpu.index)), ("UUID", gpu.uuid),
             ("pci_bus_id", f"00000000:{0x18 + 0x10 * gpu.index:02X}:00.0"),
             ("device", f"nvidia{gpu.index}"), ("modelName", gpu.name), ("Hostname", gpu.node))
    return ",".join(f'{k}="{_escape(v)}"' for k, v in pairs)


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def render_dcgm(gpus: Sequence[GpuState]) -> str:
    """The Prometheus text exposition of ``gpus``, dcgm-exporter style."""
    present = [g for g in gpus if g.present]
    lines: list[str] = []
    for metric in DCGM_METRICS:
        lines.append(f"# HELP {metric.name} {metric.help}")
        lines.append(f"# TYPE {metric.name} {metric.type}")
        lines.extend(f"{metric.name}{{{_labels(g)}}} {_number(metric.value(g))}"
                     for g in present)
    return "\n".join(lines) + "\n"
