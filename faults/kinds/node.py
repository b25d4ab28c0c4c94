"""Node fault kinds: CPU and memory hogs, each bounded in a cgroup of its own."""

from faults.base import FaultKind, Param

NODE_SELECTOR_DOC = "which node: a node name (node-0), or null when the target has one agent"

_DURATION = Param("duration_s", float, "how long the hog runs before it stops by itself",
                  default=60.0, minimum=1.0, maximum=86400.0)

NODE_CPU_HOG = FaultKind(
    name="node.cpu_hog",
    summary="busy workers compete for the node's CPUs, bounded by a cgroup CPU quota",
    module="faults.node",
    func="cpu_hog",
    coverage_layer="node",
    family="CPU saturation",
    also_layers=("container",),
    injected_at={"lab": "process", "host": "process"},
    selector="node",
    params=(
        Param("workers", int, "busy worker processes (stress-ng --cpu N)", default=1,
              minimum=1, maximum=256),
        Param("cpu_percent", float, "the cgroup's CPU quota, in percent of one CPU (the "
              "bound: 50 = half a CPU, 200 = two CPUs)", default=50.0, minimum=1.0,
              maximum=25_600.0),
        _DURATION,
    ),
    seen_through="higher latency of what runs on the node; the hog's cgroup cpu.stat "
                 "(nr_throttled) shows the bound holding",
    tags=("node", "cpu", "hog", "cgroup", "noisy-neighbour"),
)

NODE_MEMORY_HOG = FaultKind(
    name="node.memory_hog",
    summary="a process holds memory on the node, bounded by a cgroup memory limit",
    module="faults.node",
    func="memory_hog",
    coverage_layer="node",
    family="Memory pressure",
    also_layers=("container",),
    injected_at={"lab": "process", "host": "process"},
    selector="node",
    params=(
        Param("memory_mib", int, "memory held (stress-ng --vm-bytes, pages touched)",
              default=256, minimum=1, maximum=4_194_304),
        Param("limit_mib", int, "the cgroup's memory limit (the bound; null: memory_mib + "
              "48 MiB for the hog itself)", default=None, minimum=8, maximum=4_194_304,
              nullable=True),
        _DURATION,
    ),
    seen_through="less free memory on the node (page cache evicted, swap, OOM kills "
                 "elsewhere when the node is full); the hog's cgroup never exceeds its limit",
    tags=("node", "memory", "hog", "cgroup", "noisy-neighbour"),
)

KINDS: tuple[FaultKind, ...] = (NODE_CPU_HOG, NODE_MEMORY_HOG)
