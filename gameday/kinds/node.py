"""Node fault kinds: CPU and memory hogs, each bounded in a cgroup of its own."""

from dataclasses import dataclass

from gameday.errors import InvalidInput
from gameday.kinds.params import param
from gameday.kinds.selectors import Selector
from gameday.kinds.spec import KindParams, KindSpec

__all__ = ["KINDS", "NODE_CPU_HOG", "NODE_MEMORY_HOG", "NODE_NAME", "CpuHogParams",
           "MemoryHogParams"]

#: Extra memory a hog's cgroup gets over what it holds when no limit is given.
MEMORY_HEADROOM_MIB = 48

NODE_NAME = Selector(argument="node", doc="which node: a node name (node-0), or null when "
                     "the target has one agent", name_form=True, mapping_form=False)

_DURATION_DOC = "how long the hog runs before it stops by itself"


@dataclass(frozen=True, kw_only=True)
class CpuHogParams(KindParams):
    """``node.cpu_hog``'s parameters."""

    workers: int = param("busy worker processes (stress-ng --cpu N)", default=1, minimum=1,
                         maximum=256)
    cpu_percent: float = param("the cgroup's CPU quota, in percent of one CPU (the bound: "
                               "50 = half a CPU, 200 = two CPUs)", default=50.0, minimum=1.0,
                               maximum=25_600.0)
    duration_s: float = param(_DURATION_DOC, default=60.0, minimum=1.0, maximum=86400.0)


@dataclass(frozen=True, kw_only=True)
class MemoryHogParams(KindParams):
    """``node.memory_hog``'s parameters."""

    rules = "limit_mib >= memory_mib"

    memory_mib: int = param("memory held (stress-ng --vm-bytes, pages touched)", default=256,
                            minimum=1, maximum=4_194_304)
    limit_mib: int | None = param("the cgroup's memory limit (the bound; null: memory_mib + "
                                  "48 MiB for the hog itself)", default=None, minimum=8,
                                  maximum=4_194_304)
    duration_s: float = param(_DURATION_DOC, default=60.0, minimum=1.0, maximum=86400.0)

    @property
    def limit(self) -> int:
        """The cgroup's memory limit, MiB (``limit_mib``, else ``memory_mib`` + headroom)."""
        return self.limit_mib if self.limit_mib is not None else \
            self.memory_mib + MEMORY_HEADROOM_MIB

    def check(self, path: str) -> None:
        if self.limit_mib is not None and self.limit_mib < self.memory_mib:
            raise InvalidInput(f"must be >= memory_mib ({self.memory_mib}), got "
                               f"{self.limit_mib}", path=f"{path}.limit_mib")


NODE_CPU_HOG = KindSpec(
    name="node.cpu_hog",
    summary="busy workers compete for the node's CPUs, bounded by a cgroup CPU quota",
    module="faults.node",
    func="cpu_hog",
    coverage_layer="node",
    family="CPU saturation",
    also_layers=("container",),
    injected_at={"lab": "process", "host": "process"},
    selects=NODE_NAME,
    params_type=CpuHogParams,
    seen_through="higher latency of what runs on the node; the hog's cgroup cpu.stat "
                 "(nr_throttled) shows the bound holding",
    tags=("node", "cpu", "hog", "cgroup", "noisy-neighbour"),
)

NODE_MEMORY_HOG = KindSpec(
    name="node.memory_hog",
    summary="a process holds memory on the node, bounded by a cgroup memory limit",
    module="faults.node",
    func="memory_hog",
    coverage_layer="node",
    family="Memory pressure",
    also_layers=("container",),
    injected_at={"lab": "process", "host": "process"},
    selects=NODE_NAME,
    params_type=MemoryHogParams,
    seen_through="less free memory on the node (page cache evicted, swap, OOM kills "
                 "elsewhere when the node is full); the hog's cgroup never exceeds its limit",
    tags=("node", "memory", "hog", "cgroup", "noisy-neighbour"),
)

KINDS: tuple[KindSpec[KindParams], ...] = (NODE_CPU_HOG, NODE_MEMORY_HOG)
