"""How long each packet (or request) is held under ``net.latency``: a delay, its
jitter, the jitter's distribution and its correlation.

One sampler serves both ends that hold traffic: the host's packet delayer
(:mod:`gameday.node.host.nfqueue`) and the lab link's relay. Correlation follows
netem's meaning: each draw's variation is ``c`` times the previous one's plus
``1 - c`` times a fresh one, so ``c = 0`` gives independent draws and ``c = 1`` a
constant offset. A draw is never below zero: a packet cannot leave before it arrived.
"""

import random
from dataclasses import dataclass, field

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

    def __post_init__(self) -> None:
        if self.distribution not in ("uniform", "normal"):
            raise ValueError(f"distribution must be uniform or normal, "
                             f"got {self.distribution!r}")
        if not 0.0 <= self.correlation <= 1.0:
            raise ValueError(f"correlation must be in [0, 1], got {self.correlation!r}")

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
