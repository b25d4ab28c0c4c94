"""The agent's Prometheus metrics, on a private registry (one per agent, so several
agents can live in one process, as in the lab and in tests)."""

from collections.abc import Callable, Iterable

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
        # each labelled counter as labels() made it, looked up once (labels() takes a
        # lock and checks its arguments on every call); the counters are never removed
        self._applied_by_kind: dict[str, Counter] = {}
        self._reverted_by_label: dict[tuple[str, str], Counter] = {}

    def expect(self, kinds: Iterable[str], reasons: Iterable[str]) -> None:
        """Export the counters of ``kinds`` (and each revert ``reason``) at zero from now,
        as Prometheus advises for label values known in advance: a rate or an alert on
        them works from the first scrape, before any fault."""
        reasons = tuple(reasons)
        for kind in kinds:
            self.applied(kind, 0)
            for reason in reasons:
                self.reverted(kind, reason, 0)

    def track_active(self, count: Callable[[], int]) -> None:
        """Read the active-fault gauge from ``count`` at each scrape."""
        self._active.set_function(lambda: float(count()))

    def applied(self, kind: str, count: int = 1) -> None:
        """``count`` more faults of ``kind`` applied (a batch counts each kind once)."""
        child = self._applied_by_kind.get(kind)
        if child is None:
            child = self._applied_by_kind[kind] = self._applied.labels(kind)
        child.inc(count)

    def reverted(self, kind: str, reason: str, count: int = 1) -> None:
        """``count`` more faults of ``kind`` reverted for ``reason``."""
        child = self._reverted_by_label.get((kind, reason))
        if child is None:
            child = self._reverted_by_label[kind, reason] = self._reverted.labels(kind, reason)
        child.inc(count)

    def render(self) -> bytes:
        """The Prometheus text exposition of every metric."""
        return generate_latest(self.registry)
