"""The agent's Prometheus metrics, on a private registry (one per agent, so several
agents can live in one process, as in the lab and in tests)."""

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

__all__ = ["CONTENT_TYPE", "AgentMetrics"]

#: Content type of :meth:`AgentMetrics.render`.
CONTENT_TYPE = CONTENT_TYPE_LATEST


class AgentMetrics:
    """``gameday_agent_active_faults``, ``gameday_agent_faults_applied_total{kind}``,
    ``gameday_agent_faults_reverted_total{kind,reason}``."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._active = Gauge("gameday_agent_active_faults",
                             "Faults this agent holds applied now.", registry=self.registry)
        self._applied = Counter("gameday_agent_faults_applied",
                                "Faults applied, by kind.", ["kind"], registry=self.registry)
        self._reverted = Counter("gameday_agent_faults_reverted",
                                 "Faults reverted, by kind and revert reason.",
                                 ["kind", "reason"], registry=self.registry)

    def track_active(self, count: Callable[[], int]) -> None:
        """Read the active-fault gauge from ``count`` at each scrape."""
        self._active.set_function(lambda: float(count()))

    def applied(self, kind: str, count: int = 1) -> None:
        """``count`` more faults of ``kind`` applied (a batch counts each kind once)."""
        self._applied.labels(kind).inc(count)  # positional: cheaper than by keyword

    def reverted(self, kind: str, reason: str, count: int = 1) -> None:
        """``count`` more faults of ``kind`` reverted for ``reason``."""
        self._reverted.labels(kind, reason).inc(count)

    def render(self) -> bytes:
        """The Prometheus text exposition of every metric."""
        return generate_latest(self.registry)
