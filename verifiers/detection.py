"""When did the system itself notice the fault: its own detection signal, after the fact.

Time to detect is measured from the system's own record, never from the prober's: the
controller's event log (the first ``alert_firing`` or ``gpu_cordoned`` event after the
onset, with the controller's own timestamps) or a PromQL expression (the first instant
after the onset at which it is non-empty and non-zero, e.g.
``ALERTS{alertstate="firing",severity="critical"}``, read back as a range query at
``resolution_s``). Both are read once the fault has played out, so nothing is sampled
while it runs.
"""

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from gameday.activity import Session
from gameday.errors import GamedayError, one_line
from gameday.promql import PromQL
from verifiers._promql import prometheus_url_of
from verifiers.placement import PlacementSource, gpu_label
from verifiers.sources import placement_source

__all__ = ["DETECTION_EVENTS", "Detection", "DetectionSignal", "PlacementDetection",
           "PromQLDetection", "detection_signal"]

DETECTION_EVENTS = ("alert_firing", "gpu_cordoned")


@dataclass(frozen=True)
class Detection:
    t: float
    what: str


class DetectionSignal(Protocol):
    error: str  # why the last read failed ("" when it did not)

    def describe(self) -> str: ...

    def first_after(self, onset: float) -> Detection | None:
        """The first detection at or after ``onset``; None if none (or unreadable)."""
        ...


class PlacementDetection:
    """The controller's first alert or cordon event after the onset (for the faulted GPUs
    when the run knows them, else for any GPU)."""

    def __init__(self, source: PlacementSource, gpus: list[tuple[str, int]]) -> None:
        self.source = source
        self.gpus = set(gpus)
        self.error = ""

    def describe(self) -> str:
        return f"placement events at {self.source.describe()}"

    def first_after(self, onset: float) -> Detection | None:
        try:
            events = self.source.read().events
        except GamedayError as exc:
            self.error = one_line(str(exc), 200)
            return None
        for event in events:
            if event.type not in DETECTION_EVENTS or event.t < onset or event.gpu is None:
                continue
            if self.gpus and (event.node, event.gpu) not in self.gpus:
                continue
            what = f"{event.type} {gpu_label(event.node, event.gpu)}"
            return Detection(event.t, what + (f" ({event.alert})" if event.alert else ""))
        return None


class PromQLDetection:
    """The first instant after the onset at which ``query`` is non-empty and non-zero."""

    def __init__(self, client: PromQL, query: str, now: Callable[[], float],
                 resolution_s: float = 0.1) -> None:
        self.client = client
        self.query = query
        self.resolution_s = resolution_s
        self.error = ""
        self._now = now

    def describe(self) -> str:
        return f"promql {self.query}"

    def first_after(self, onset: float) -> Detection | None:
        end = self._now()
        start = onset - max(self.resolution_s, 5.0)  # to know the state before the onset
        try:
            found = self.client.range(self.query, start, max(end, onset), self.resolution_s)
        except GamedayError as exc:
            self.error = one_line(str(exc), 200)
            return None
        true_at: dict[float, bool] = {}
        for series in found:
            for t, value in series.samples:
                true_at[t] = true_at.get(t, False) or value != 0
        times = sorted(true_at)
        before = [t for t in times if t < onset]
        was_true = bool(before) and true_at[before[-1]]
        for t in times:
            if t < onset:
                continue
            if true_at[t] and not was_true:
                return Detection(t, f"promql {one_line(self.query, 80)} true")
            was_true = true_at[t]
        if was_true:
            return Detection(onset, f"promql {one_line(self.query, 80)} already true at onset")
        return None


def detection_signal(detect: Mapping[str, Any] | None, session: Session,
                     ) -> DetectionSignal | None:
    """The signal named by a verifier's ``detect`` argument.

    ``None``: the target's placement events when it has a placement URL, else none;
    ``{}``: none; ``{"placement": "lab" | "target" | URL}``; ``{"promql": EXPR,
    "prometheus_url"?: URL, "resolution_s"?: 0.1}``.
    """
    gpus = sorted({(gpu.node, gpu.index) for gpu in session.faulted_gpus()})
    if detect is None:
        target = session.target
        if target is None or not target.placement_url:
            return None
        return PlacementDetection(placement_source("target"), gpus)
    if not isinstance(detect, Mapping):
        raise GamedayError('detect must be a mapping: {"placement": "lab"}, '
                           '{"promql": EXPR} or {}')
    unknown = sorted(set(detect) - {"placement", "promql", "prometheus_url", "resolution_s"})
    if unknown:
        raise GamedayError(f"detect has unknown key {unknown[0]!r} (known: placement, promql, "
                           f"prometheus_url, resolution_s)")
    if detect.get("placement") and detect.get("promql"):
        raise GamedayError("detect takes one of placement, promql")
    if detect.get("placement"):
        return PlacementDetection(placement_source(str(detect["placement"])), gpus)
    if detect.get("promql"):
        resolution = float(detect.get("resolution_s", 0.1))
        if resolution <= 0:
            raise GamedayError(f"detect.resolution_s must be > 0, got {resolution:g}")
        client = PromQL(prometheus_url_of(detect.get("prometheus_url")))
        return PromQLDetection(client, str(detect["promql"]), session.clock.now, resolution)
    return None
