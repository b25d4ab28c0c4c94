"""The agent's Prometheus metrics, on a private registry (one per agent, so several
agents can live in one process, as in the lab and in tests)."""

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from gameday.agent.redaction import describe_target

__all__ = ["CONTENT_TYPE", "AgentMetrics"]

#: Content type of :meth:`AgentMetrics.render`.
CONTENT_TYPE = CONTENT_TYPE_LATEST


class AgentMetrics:
    """``gameday_agent_active_faults``, ``gameday_agent_faults_applied_total{kind}``,
    ``gameday_agent_faults_reverted_total{kind,reason}`` and the fault windows
    ``gameday_fault_active{kind,target,layer,run,fault}``: 1 while a fault is held, 0 after
    (the last ``ENDED_KEPT`` ended windows are kept at 0, older ones are dropped)."""

    #: How many ended fault windows stay exported at 0.
    ENDED_KEPT = 200

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
        self._windows = _Windows()
        self.registry.register(self._windows)
        self._halted = Gauge("gameday_agent_halted",
                             "1 while this agent's safety lever is engaged (gameday halt).",
                             registry=self.registry)

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

    def track_halted(self, engaged: Callable[[], bool]) -> None:
        """Read the lever gauge from ``engaged`` at each scrape."""
        self._halted.set_function(lambda: 1.0 if engaged() else 0.0)

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

    def held(self, fault_id: str, kind: str, target: Mapping[str, Any], layer: str,
             run: str, *, node: str = "") -> None:
        """The fault ``fault_id`` is held from now: its window reads 1. ``target`` is
        shown as ``node:key=value,...``, redacted
        (:func:`gameday.agent.redaction.describe_target`: this page needs no token), when
        a scrape first shows the window (``target`` is the fault's own, never changed);
        ``run`` is the run that asked for it; ``fault`` its id."""
        window = _Window(kind, target, layer, run, node, fault_id)
        windows = self._windows
        with windows.lock:
            windows.held[fault_id] = window
            windows.ended.pop(fault_id, None)

    def released(self, fault_id: str) -> None:
        """The fault ``fault_id`` is no longer held: its window reads 0."""
        windows = self._windows
        with windows.lock:
            window = windows.held.pop(fault_id, None)
            if window is None:
                return
            windows.ended[fault_id] = window
            while len(windows.ended) > self.ENDED_KEPT:
                windows.ended.popitem(last=False)

    def render(self) -> bytes:
        """The Prometheus text exposition of every metric."""
        return generate_latest(self.registry)


class _Window:
    """One fault's window: what its labels are made of, and the labels once made (a
    batch of faults is described when a scrape first shows it, not while it is applied:
    the description was a twelfth of an agent's time per batch)."""

    __slots__ = ("_labels", "fault", "kind", "layer", "node", "run", "target")

    def __init__(self, kind: str, target: Mapping[str, Any], layer: str, run: str,
                 node: str, fault: str) -> None:
        self.kind, self.target, self.layer, self.run = kind, target, layer, run
        self.node, self.fault = node, fault
        self._labels: tuple[str, str, str, str, str] | None = None

    def labels(self) -> tuple[str, str, str, str, str]:
        """``(kind, target, layer, run, fault)``, the target ``node:key=value,...``."""
        if self._labels is None:
            where = describe_target(self.target)
            self._labels = (self.kind, f"{self.node}:{where}" if self.node else where,
                            self.layer, self.run, self.fault)
        return self._labels


class _Windows:
    """The fault windows, ``gameday_fault_active{kind,target,layer,run,fault}``, made at
    each scrape from the faults held (1) and the last ones ended (0): a custom collector,
    as prometheus_client advises for label sets that come and go (a labelled child made
    per fault, and looked up again at its end, was a fifth of an agent's CPU per batch)."""

    NAME = "gameday_fault_active"
    HELP = "1 while the fault is held, 0 after: game-day windows."
    LABELS = ("kind", "target", "layer", "run", "fault")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.held: dict[str, _Window] = {}  # by fault id
        self.ended: OrderedDict[str, _Window] = OrderedDict()  # by fault id, oldest first

    def describe(self) -> list[GaugeMetricFamily]:
        return [GaugeMetricFamily(self.NAME, self.HELP, labels=self.LABELS)]

    def collect(self) -> Iterator[GaugeMetricFamily]:
        with self.lock:
            ended, held = list(self.ended.values()), list(self.held.values())
        family = GaugeMetricFamily(self.NAME, self.HELP, labels=self.LABELS)
        for window in ended:
            family.add_metric(window.labels(), 0.0)
        for window in held:
            family.add_metric(window.labels(), 1.0)
        yield family
