"""A seeded pick of some of a selector's matches: ``pick: {count: N | percent: P, seed: S}``.

A process selector that matches several processes (two replicas by ``name``, every
worker of a ``torchrun`` agent by ``parent``) may say how many of them one fault
takes: ``count`` of them, or ``percent`` of them (rounded up, at least one). Which
ones is a function of the matches and the ``seed`` only — the pids sorted, then a
``random.Random(seed)`` sample — so the plan (the agent's check) and the run (the
agent's apply) pick the same processes while nothing else changed, and the journal
can say what was picked and why. The orchestrator checks a pick before anything runs;
the agent checks it again and applies it (``params.max_processes`` still bounds what
it picked).
"""

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["PICK_KEYS", "Pick", "parse_pick"]

PICK_KEYS = ("count", "percent", "seed")


@dataclass(frozen=True)
class Pick:
    """``count`` or ``percent`` (exactly one) of the matches, chosen by ``seed``."""

    seed: int
    count: int | None = None
    percent: float | None = None

    def how_many(self, matches: int) -> int:
        """How many of ``matches`` processes this pick takes."""
        if self.count is not None:
            return min(self.count, matches)
        assert self.percent is not None
        return min(matches, max(1, math.ceil(matches * self.percent / 100 - 1e-9)))

    def choose(self, pids: Sequence[int]) -> list[int]:
        """The picked pids, sorted: a seeded sample of the sorted distinct ``pids``."""
        ordered = sorted(set(pids))
        return sorted(random.Random(self.seed).sample(ordered, self.how_many(len(ordered))))

    def describe(self) -> str:
        share = f"{self.count}" if self.count is not None else f"{self.percent:g}%"
        return f"{share} picked with seed {self.seed}"

    def to_json(self) -> dict[str, Any]:
        found: dict[str, Any] = {"seed": self.seed}
        if self.count is not None:
            found["count"] = self.count
        if self.percent is not None:
            found["percent"] = self.percent
        return found


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def parse_pick(value: Any) -> Pick:
    """The :class:`Pick` of a ``{count | percent, seed}`` mapping; ValueError saying
    which key is wrong (``"seed: must be an integer, got 'x'"``) otherwise."""
    if not isinstance(value, Mapping):
        raise ValueError(f"must be a mapping {{count: N | percent: P, seed: S}}, got {value!r}")
    unknown = sorted(str(key) for key in value if key not in PICK_KEYS)
    if unknown:
        raise ValueError(f"{unknown[0]}: unknown (known: {', '.join(PICK_KEYS)})")
    if ("count" in value) == ("percent" in value):
        raise ValueError("needs exactly one of count or percent")
    if "seed" not in value or not _integer(value["seed"]) or not 0 <= value["seed"] < 2**63:
        raise ValueError(f"seed: must be an integer >= 0 (the pick is reproducible), got "
                         f"{value.get('seed')!r}")
    count, percent = value.get("count"), value.get("percent")
    if count is not None and (not _integer(count) or not 1 <= count <= 4096):
        raise ValueError(f"count: must be an integer between 1 and 4096, got {count!r}")
    if percent is not None and (isinstance(percent, bool) or not isinstance(percent, int | float)
                                or not math.isfinite(percent) or not 0 < percent <= 100):
        raise ValueError(f"percent: must be a number in (0, 100], got {percent!r}")
    return Pick(int(value["seed"]), count, None if percent is None else float(percent))
