"""How long each packet (or request) is held under ``net.latency``: a delay, its
jitter, the jitter's distribution and its correlation.

One sampler serves both ends that hold traffic: the host's packet delayer
(:mod:`gameday.node.host.nfqueue`) and the lab link's relay. Correlation follows
netem's meaning: each draw's variation is ``c`` times the previous one's plus
``1 - c`` times a fresh one, so ``c = 0`` gives independent draws and ``c = 1`` a
constant offset. A draw is never below zero: a packet cannot leave before it arrived.
:meth:`DelaySampler.release_at` keeps the order: an item never leaves before the one
that came before it.
"""

import random
from dataclasses import dataclass, field

from gameday.kinds.net import LatencyParams

__all__ = ["DelaySampler"]


@dataclass
class DelaySampler:
    """Seconds to hold each item: ``delay_s`` varied by ``jitter_s`` (uniform half-width
    or normal standard deviation), ``correlation`` in [0, 1]."""

    delay_s: float
    jitter_s: float = 0.0
    distribution: str = "uniform"  # uniform | normal
    correlation: float = 0.0
    rng: random.Random = field(default_factory=random.Random, repr=False)
    _last: float = field(default=0.0, repr=False)
    _last_release: float = field(default=float("-inf"), repr=False)

    def __post_init__(self) -> None:
        if self.distribution not in ("uniform", "normal"):
            raise ValueError(f"distribution must be uniform or normal, "
                             f"got {self.distribution!r}")
        if not 0.0 <= self.correlation <= 1.0:
            raise ValueError(f"correlation must be in [0, 1], got {self.correlation!r}")

    @staticmethod
    def of(params: LatencyParams) -> "DelaySampler":
        """The sampler a ``net.latency`` fault's parameters describe."""
        return DelaySampler(params.delay_ms / 1000.0, params.jitter_ms / 1000.0,
                            params.distribution, params.correlation / 100.0)

    def _fresh(self) -> float:
        if self.distribution == "normal":
            return self.rng.gauss(0.0, self.jitter_s)
        return self.rng.uniform(-self.jitter_s, self.jitter_s)

    def draw(self) -> float:
        """The next item's hold, in seconds (>= 0)."""
        if self.jitter_s <= 0:
            return self.delay_s
        variation = self.correlation * self._last + (1.0 - self.correlation) * self._fresh()
        self._last = variation
        return max(0.0, self.delay_s + variation)

    def release_at(self, arrival: float) -> float:
        """When an item that arrived at ``arrival`` may leave: after its own drawn hold,
        and never before the item before it (items leave in the order they came)."""
        release = max(arrival + self.draw(), self._last_release)
        self._last_release = release
        return release
