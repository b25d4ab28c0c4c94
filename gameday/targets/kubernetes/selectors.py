"""GPU selectors on a Kubernetes fleet: every key narrows the match (they combine with AND).

=====================  =====================================================================
key                    matches
=====================  =====================================================================
``node``               the node with this name (or a list of names)
``node_labels``        nodes carrying every one of these labels, e.g.
                       ``{nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}``
``index``              the GPU index on its node (or a list of indexes)
``uuid``               the GPU with this UUID (or a list of UUIDs)
``nvlink_domain``      GPUs in this NVLink domain (from the agent's inventory)
``holding_shard``      the GPU(s) a shard pod is placed on (pod label ``gameday.dev/shard``)
``percent``            then keep this percentage of what matched (rounded up, at least
                       one), drawn with ``seed`` (default 0) so a run is reproducible
=====================  =====================================================================

``{percent: 10}`` alone is 10 % of the whole fleet. A selector that matches nothing is a
one-line :class:`InvalidInput` naming the selector; nothing is injected.
"""

import math
import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from gameday.errors import InvalidInput
from gameday.kinds.gpu import GPU_SELECTOR
from gameday.targets.kubernetes.discovery import FleetGpu

__all__ = ["SELECTOR_KEYS", "select_gpus"]

SELECTOR_KEYS = GPU_SELECTOR.key_names


def _one_or_many(value: Any) -> set[str]:
    values = value if isinstance(value, list | tuple) else [value]
    return {str(v) for v in values}


def _filters(selector: Mapping[str, Any], where: str) -> list[Callable[[FleetGpu], bool]]:
    tests: list[Callable[[FleetGpu], bool]] = []
    if "node" in selector:
        nodes = _one_or_many(selector["node"])
        tests.append(lambda g: g.node in nodes)
    if "node_labels" in selector:
        labels = selector["node_labels"]
        if not isinstance(labels, Mapping) or not labels:
            raise InvalidInput("must be a non-empty mapping of label: value",
                               path=f"{where}.node_labels")
        wanted = {str(k): str(v) for k, v in labels.items()}
        tests.append(lambda g: all(g.node_labels.get(k) == v for k, v in wanted.items()))
    if "index" in selector:
        indexes = _one_or_many(selector["index"])
        tests.append(lambda g: str(g.index) in indexes)
    if "uuid" in selector:
        uuids = _one_or_many(selector["uuid"])
        tests.append(lambda g: g.uuid in uuids)
    if "nvlink_domain" in selector:
        domains = _one_or_many(selector["nvlink_domain"])
        tests.append(lambda g: g.nvlink_domain in domains)
    if "holding_shard" in selector:
        shards = _one_or_many(selector["holding_shard"])
        tests.append(lambda g: bool(shards & set(g.shards)))
    return tests


def _percent(selector: Mapping[str, Any], where: str) -> float | None:
    if "percent" not in selector:
        return None
    value = selector["percent"]
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 100:
        raise InvalidInput(f"must be a number in (0, 100], got {value!r}",
                           path=f"{where}.percent")
    return float(value)


def select_gpus(gpus: Sequence[FleetGpu], selector: Mapping[str, Any], *,
                where: str = "gpu") -> list[FleetGpu]:
    """The GPUs of ``gpus`` (in (node, index) order, as discovery lists them) that
    ``selector`` picks, in that order."""
    if not isinstance(selector, Mapping) or not selector:
        raise InvalidInput(f"a GPU selector needs one of {', '.join(SELECTOR_KEYS[:-1])}",
                           path=where)
    unknown = sorted(set(selector) - set(SELECTOR_KEYS))
    if unknown:
        raise InvalidInput(f"unknown selector key (known: {', '.join(SELECTOR_KEYS)})",
                           path=f"{where}.{unknown[0]}")
    percent = _percent(selector, where)
    tests = _filters(selector, where)
    matches = [g for g in gpus if all(test(g) for test in tests)]
    if percent is not None and matches and percent < 100:  # (100: every one, in order)
        count = max(1, math.ceil(len(matches) * percent / 100))
        seed = selector.get("seed", 0)
        picked = random.Random(str(seed)).sample(range(len(matches)), count)
        matches = [matches[i] for i in sorted(picked)]
    if not matches:
        raise InvalidInput(f"selector {dict(selector)} matches no GPU on target kubernetes "
                           f"({len(gpus)} GPUs discovered)", path=where)
    return matches
