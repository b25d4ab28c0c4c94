"""What happened when, read from a journal: the data behind the report's charts.

Times are seconds relative to the fault onset (the first fault's ``applied_at``, or the
run's start when no fault was applied), so the charts read "+1.2 s after the fault".
Steady-state probes appear in a journal's verifier results twice, once per check;
``verifier_phases`` says which results are the "before" and which the "after" check.
"""

import datetime
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gameday.contract.gpus import gpu_label
from gameday.evidence.journal_shape import gameday_section


@dataclass(frozen=True)
class Window:
    """A fault's active window."""

    label: str
    start: float
    end: float
    open_ended: bool = False


@dataclass(frozen=True)
class Marker:
    """A point event on the timeline: kind is fault, alert, reshard, sli, verifier.

    ``phase`` is "before" or "after" for a steady-state probe's result, else empty."""

    t: float
    kind: str
    label: str
    ok: bool | None = None
    phase: str = ""


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

    def verdict(self) -> str:
        """"met", "missed by X unit", or "no objective", with the value as the chart shows it."""
        if self.objective is None:
            return "no objective"
        if self.measured <= self.objective:
            return "met"
        return f"missed by {number(self.measured - self.objective)} {self.unit}"


def number(value: float) -> str:
    """``value`` to three significant digits, without an exponent or trailing zeros."""
    if value == 0 or not math.isfinite(value):
        return f"{value:g}"
    digits = max(0, 2 - math.floor(math.log10(abs(value))))
    text = f"{round(value, digits):.{digits}f}"
    return text.rstrip("0").rstrip(".") if digits else text


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
    faults_listed: int = 0
    #: why the run stopped early (``interrupted by SIGINT during ...``), or ""
    interrupted: str = ""

    @property
    def deadline(self) -> float | None:
        """When recovery was due: the fault onset (0) plus the RTO objective."""
        return None if self.slo_s is None or not self.windows else float(self.slo_s)


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


def _gpu(fault: Mapping[str, Any]) -> str:
    target = fault.get("target") or {}
    node = str(fault.get("node") or "")
    return gpu_label(node, target["gpu"]) if "gpu" in target else node


def _instant(value: Any) -> float | None:
    return _epoch(value) if isinstance(value, str) else None


def verifier_phases(journal: dict[str, Any]) -> list[str]:
    """For each of ``gameday.verifiers``: "before" or "after" when it is a steady-state
    probe's result (its name is one of that check's probes and it was recorded while the
    check ran), else ""."""
    checks: dict[str, tuple[set[str], float, float]] = {}
    for phase, state in (journal.get("steady_states") or {}).items():
        probes = [p for p in (state or {}).get("probes") or [] if isinstance(p, dict)]
        starts = [t for p in probes if (t := _instant(p.get("start"))) is not None]
        ends = [t for p in probes if (t := _instant(p.get("end"))) is not None]
        if phase in ("before", "after") and starts and ends:
            names = {str((p.get("activity") or {}).get("name")) for p in probes}
            checks[phase] = (names, min(starts), max(ends))
    phases = []
    for result in gameday_section(journal).get("verifiers") or []:
        at = result.get("at")
        phases.append(next((phase for phase, (names, first, last) in checks.items()
                            if result.get("name") in names and isinstance(at, int | float)
                            and first <= at <= last), ""))
    return phases


def build_timeline(journal: dict[str, Any]) -> Timeline:
    gd = gameday_section(journal)
    faults = gd.get("faults") or []
    verifiers = gd.get("verifiers") or []
    extension: Mapping[str, Any] = gd.get("extension") or {}
    slo = extension.get("slo") or {}
    applied = [float(f["applied_at"]) for f in faults if f.get("applied_at")]
    start = _epoch(journal.get("start"))
    end = _epoch(journal.get("end"))
    instants = applied + [float(v["at"]) for v in verifiers if v.get("at")]
    instants += [float(e["t"]) for e in gd.get("timeline") or [] if e.get("t")]
    start = start if start is not None else min(instants, default=0.0)
    end = end if end is not None else max(instants, default=start)
    origin = min(applied) if applied else start
    line = Timeline(origin=origin, start=start - origin, end=max(end, start) - origin,
                    slo_s=slo.get("rto_s"), faults_listed=len(faults))
    verdict: Mapping[str, Any] = gd.get("verdict") or {}
    if verdict.get("status") == "interrupted":
        line.interrupted = next((str(r) for r in verdict.get("reasons") or []
                                 if str(r).startswith("interrupted")), "interrupted")

    def rel(t: float) -> float:
        return t - origin

    for fault in (f for f in faults if f.get("applied_at")):
        reverted = fault.get("reverted_at")
        line.windows.append(Window(
            f"{fault.get('kind')} on {_gpu(fault)} ({fault.get('injected_at')})",
            rel(float(fault["applied_at"])),
            rel(float(reverted)) if reverted else line.end, open_ended=not reverted))
        line.markers.append(Marker(rel(float(fault["applied_at"])), "fault",
                                   f"{fault.get('kind')} injected"))
    for result, phase in zip(verifiers, verifier_phases(journal), strict=True):
        _fold_verifier(line, result, rel, phase)
    for event in gd.get("timeline") or []:
        if event.get("event") == "sli_down" and event.get("at"):
            line.markers.append(Marker(rel(float(event["at"])), "sli", "SLI down", False))
    line.markers.sort(key=lambda m: m.t)
    return line


def _fold_throughput(line: Timeline, name: str, m: Mapping[str, Any], rel: Any) -> None:
    """A degradation's slowdown and time back to pace, against their objectives; the
    moment the job was back to pace, on the timeline."""
    if isinstance(m.get("slowdown_pct"), int | float):
        line.objectives.append(Objective(f"{name} slowdown", float(m["slowdown_pct"]),
                                         m.get("max_slowdown_pct"), "%"))
    if isinstance(m.get("time_to_recover_s"), int | float):
        line.objectives.append(Objective(f"{name} back to pace",
                                         float(m["time_to_recover_s"]),
                                         m.get("recover_within_s"), "s"))
    if m.get("recovered_at"):
        unit = m.get("unit") or "steps"
        line.markers.append(Marker(rel(float(m["recovered_at"])), "recovered",
                                   f"{name}: back to {_pct(m.get('recover_to'))} of the "
                                   f"baseline {unit}/s"))


def _pct(share: Any) -> str:
    return f"{share:.0%}" if isinstance(share, int | float) else "pace"


def _fold_verifier(line: Timeline, result: Mapping[str, Any], rel: Any, phase: str
                   ) -> None:
    m = result.get("measurement") or {}
    verifier = str(result.get("verifier") or "")
    name = str(result.get("name") or verifier)
    if result.get("at"):
        line.markers.append(Marker(rel(float(result["at"])), "verifier", name,
                                   result.get("passed"), phase))
    if "timeline" in m and isinstance(m["timeline"], list):
        # [sent, ok, answered] (older journals: [sent, ok]); a change shows when it arrived
        line.sli = [(rel(float(point[-1] if len(point) > 2 else point[0])), bool(point[1]))
                    for point in m["timeline"]]
        line.sli_label = str(m.get("sli") or "SLI")
        if m.get("onset") is not None and m.get("recovered_at") is not None:
            line.rto = (rel(float(m["onset"])), rel(float(m["recovered_at"])))
        line.rto_s = m.get("rto_s")
        if m.get("slo_s") is not None:
            line.slo_s = m["slo_s"]
        if m.get("rto_s") is not None:
            line.objectives.append(Objective("RTO", float(m["rto_s"]), line.slo_s, "s"))
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
    if verifier == "throughput.degradation":
        _fold_throughput(line, name, m, rel)
    if verifier == "steady.http_latency_ok" and isinstance(m.get("p99_ms"), int | float):
        when = f" ({phase})" if phase else ""
        line.objectives.append(Objective(f"{name} p99{when}", float(m["p99_ms"]),
                                         m.get("bound_ms"), "ms"))
