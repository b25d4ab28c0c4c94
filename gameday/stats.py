"""Figures for people, one definition for every report and line: percentiles of measured
values (RTOs, latencies) and counts in words (``1 probe``, ``2 probes``)."""

import math
from collections.abc import Iterable

__all__ = ["percentile", "plural"]


def percentile(values: Iterable[float], q: float, *, nearest_rank: bool = False) -> float:
    """The ``q``-quantile (``0 <= q <= 1``) of ``values``; ``ValueError`` for no values.

    By linear interpolation between the closest ranks (``[1, 2, 3, 4]`` at 0.5 is 2.5);
    ``nearest_rank``: the smallest value with at least ``q`` of them at or below it, so
    always a value that was seen (of 20 latencies the p99 is the slowest; of 200, the
    second slowest).
    """
    if not 0 <= q <= 1:
        raise ValueError(f"quantile must be in [0, 1], got {q}")
    ordered = sorted(values)
    if not ordered:
        raise ValueError("percentile of no values")
    if nearest_rank:
        return ordered[max(1, math.ceil(q * len(ordered))) - 1]
    rank = (len(ordered) - 1) * q
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def plural(count: int, word: str, many: str | None = None) -> str:
    """``count`` and ``word``, in the plural (``many``, else ``word`` + ``s``) unless
    ``count`` is 1."""
    return f"{count} {word if count == 1 else (many or word + 's')}"
