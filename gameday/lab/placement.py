"""Where shards go: the initial placement and the choice of a GPU for a shard to move to.

Pure functions over typed GPU slots, so the controller's topology rules are tested
without processes. One shard per GPU when possible; a move prefers a free healthy GPU
in the same NVLink domain (same node), then a free one elsewhere, then the least loaded
healthy GPU (same domain first).
"""

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from gameday.contract.gpus import gpu_label

__all__ = ["GpuKey", "GpuSlot", "choose_gpu", "initial_placement"]

GpuKey = tuple[str, int]  # (node, gpu index)
GpuHealth = Literal["healthy", "cordoned"]


@dataclass
class GpuSlot:
    """A GPU as the controller schedules it."""

    node: str
    gpu: int
    uuid: str
    nvlink_domain: str
    order: int  # position in the cluster, for stable tie-breaks
    state: GpuHealth = "healthy"

    @property
    def key(self) -> GpuKey:
        return (self.node, self.gpu)

    @property
    def label(self) -> str:
        return gpu_label(self.node, self.gpu)


def initial_placement(nodes: Sequence[str], gpus_per_node: int, shards: int) -> list[GpuKey]:
    """Shard ``i``'s first GPU: consecutive shards fill each node evenly (so neighbours
    share an NVLink domain) and every node keeps its spare GPUs for local moves."""
    per_node = max(1, math.ceil(shards / len(nodes)))
    if per_node > gpus_per_node:
        raise ValueError(f"{shards} shards do not fit on {len(nodes)} x {gpus_per_node} GPUs")
    return [(nodes[i // per_node], i % per_node) for i in range(shards)]


def choose_gpu(gpus: Sequence[GpuSlot], load: Mapping[GpuKey, int], *,
               domain: str | None = None, prefer: GpuKey | None = None,
               avoid: GpuKey | None = None) -> GpuSlot | None:
    """The healthy GPU a shard should run on, or ``None`` if no GPU is healthy.

    ``load``: shards already placed per GPU (not counting the shard being placed).
    ``prefer``: take this GPU if it is healthy and free (a restart in place, the initial
    placement). ``domain``: the NVLink domain the shard comes from. ``avoid``: never this
    GPU (the one being vacated).
    """
    healthy = [g for g in gpus if g.state == "healthy" and g.key != avoid]
    for slot in healthy:
        if slot.key == prefer and load.get(slot.key, 0) == 0:
            return slot
    if not healthy:
        return None

    def rank(slot: GpuSlot) -> tuple[bool, bool, int, int]:
        used = load.get(slot.key, 0)
        return (used > 0, slot.nvlink_domain != domain, used, slot.order)

    return min(healthy, key=rank)
