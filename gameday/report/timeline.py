"""What happened when, read from a journal: the data behind the report's charts.

Times are seconds relative to the fault onset (the first fault's ``applied_at``, or the
run's start when no fault was applied), so the charts read "+1.2 s after the fault".
"""

import datetime
from dataclasses import dataclass, field
from typing import Any

from gameday.targets import gpu_label


@dataclass(frozen=True)
class Window:
    """A fault's active window."""

    label: str
    start: float
    end: float
    open_ended: bool = False


@dataclass(frozen=True)
class Marker:
    """A point event on the timeline: kind is fault, alert, reshard, sli, verifier."""

    t: float
    kind: str
    label: str
    ok: bool | None = None


@dataclass(frozen=True)
class Objective:
    """A measured value against its objective (RTO vs SLO, p99 vs bound, ...)."""

    label: str
    measured: float
    objective: float | None
    unit: str

    @property
    def met(self) -> bool | None:
        return None if self.objective is None else self.measured <= self.objective


@dataclass
class Timeline:
    origin: float
    start: float
    end: float
    windows: list[Window] = field(default_factory=list)
    sli: list[tuple[float, bool]] = field(default_factory=list)  # state changes
    sli_label: str = ""
    rto: tuple[float, float] | None = None  # (onset, recovered), relative
    rto_s: float | None = None
    slo_s: float | None = None
    markers: list[Marker] = field(default_factory=list)
    objectives: list[Objective] = field(default_factory=list)


def _epoch(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str) and value:
        try:
            parsed = datetime.datetime.fromisoformat(value)
        except ValueError:
            return None
        return (parsed if parsed.tzinfo else parsed.replace(tzinfo=datetime.UTC)).timestamp()
    return None


def _gpu(fault: dict[str, Any]) -> str:
    target = fault.get("target") or {}
    node = str(fault.get("node") or "")
    return gpu_label(node, target["gpu"]) if "gpu" in target else node


def build_timeline(journal: dict[str, Any]) -> Timeline:
    gd = journal.get("gameday") or {}
    faults = gd.get("faults") or []
    verifiers = gd.get("verifiers") or []
    applied = [float(f["applied_at"]) for f in faults if f.get("applied_at")]
    start = _epoch(journal.get("start"))
    end = _epoch(journal.get("end"))
    instants = applied + [float(v["at"]) for v in verifiers if v.get("at")]
    instants += [float(e["t"]) for e in gd.get("timeline") or [] if e.get("t")]
    start = start if start is not None else min(instants, default=0.0)
    end = end if end is not None else max(instants, default=start)
    origin = min(applied) if applied else start
    line = Timeline(origin=origin, start=start - origin, end=max(end, start) - origin)

    def rel(t: float) -> float:
        return t - origin

    for fault in faults:
        reverted = fault.get("reverted_at")
        line.windows.append(Window(
            f"{fault.get('kind')} on {_gpu(fault)} ({fault.get('injected_at')})",
            rel(float(fault["applied_at"])),
            rel(float(reverted)) if reverted else line.end, open_ended=not reverted))
        line.markers.append(Marker(rel(float(fault["applied_at"])), "fault",
                                   f"{fault.get('kind')} injected"))
    for result in verifiers:
        _fold_verifier(line, result, rel)
    for event in gd.get("timeline") or []:
        if event.get("event") == "sli_down" and event.get("at"):
            line.markers.append(Marker(rel(float(event["at"])), "sli", "SLI down", False))
    line.markers.sort(key=lambda m: m.t)
    return line


def _fold_verifier(line: Timeline, result: dict[str, Any], rel: Any) -> None:
    m = result.get("measurement") or {}
    verifier = str(result.get("verifier") or "")
    name = str(result.get("name") or verifier)
    if result.get("at"):
        line.markers.append(Marker(rel(float(result["at"])), "verifier", name,
                                   result.get("passed")))
    if "timeline" in m and isinstance(m["timeline"], list):
        line.sli = [(rel(float(t)), bool(ok)) for t, ok in m["timeline"]]
        line.sli_label = str(m.get("sli") or "SLI")
        if m.get("onset") is not None and m.get("recovered_at") is not None:
            line.rto = (rel(float(m["onset"])), rel(float(m["recovered_at"])))
        line.rto_s = m.get("rto_s")
        line.slo_s = m.get("slo_s")
        if m.get("rto_s") is not None:
            line.objectives.append(Objective("RTO", float(m["rto_s"]), m.get("slo_s"), "s"))
    if verifier.startswith("reshard."):
        detect = m.get("detect_event") or {}
        if m.get("detected_at"):
            what = detect.get("alert") or detect.get("type") or "detected"
            line.markers.append(Marker(rel(float(m["detected_at"])), "alert",
                                       f"alert {what}"))
        for move in m.get("moves") or []:
            if move.get("at"):
                line.markers.append(Marker(rel(float(move["at"])), "reshard",
                                           f"shard {move.get('shard')} → {move.get('to')}"))
        for key, label in (("time_to_detect_s", "time to detect"),
                           ("time_to_reshard_s", "time to re-shard")):
            if isinstance(m.get(key), int | float):
                slo = m.get(key.replace("time_to_", "").replace("_s", "_slo_s"))
                line.objectives.append(Objective(label, float(m[key]), slo, "s"))
    if verifier == "steady.http_latency_ok" and isinstance(m.get("p99_ms"), int | float):
        line.objectives.append(Objective(f"{name} p99", float(m["p99_ms"]),
                                         m.get("bound_ms"), "ms"))
