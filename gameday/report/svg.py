"""Inline SVG charts for the HTML report: no script, no font or image to fetch.

``timeline_svg`` draws the run on one time axis (seconds from the fault onset): fault
windows shaded, the SLI as a step line (up/down), the RTO as a bracket from the onset to
recovery, the SLO deadline (onset + the RTO objective) as a labelled vertical line, alert,
re-shard and fault events as labelled markers, and verifier results with the
steady-state probes labelled "before" and "after". It is for a run with a fault; a run
without one has no onset to draw from. ``objectives_svg`` gives each measurement a row
of its own with its own axis in its unit from 0: the measured value as a bar, the
objective as a marked line, and whether it was met or missed by how much.
"""

import math
from html import escape

from gameday.report.timeline import Marker, Objective, Timeline, number

WIDTH = 960
LEFT, RIGHT = 120, 24
COLORS = {"fault": "#c62828", "alert": "#ef6c00", "reshard": "#1565c0", "sli": "#b71c1c",
          "verifier": "#455a64", "ok": "#2e7d32", "down": "#c62828", "grid": "#e3e7ee",
          "axis": "#5f6b7a", "window": "#ef9a9a", "rto": "#6a1b9a"}


def _nice_step(span: float, target_ticks: int = 8) -> float:
    raw = max(span / target_ticks, 1e-6)
    magnitude = 10.0 ** math.floor(math.log10(raw))
    for factor in (1, 2, 2.5, 5, 10):
        if raw <= factor * magnitude:
            return float(factor * magnitude)
    return 10.0 * magnitude


def _text(x: float, y: float, text: str, *, size: int = 11, anchor: str = "start",
          fill: str = "#1d2330", weight: str = "normal", halo: bool = False,
          css: str = "") -> str:
    """A label; ``halo`` outlines it in white so a line crossing it does not hide it."""
    outline = ' stroke="#ffffff" stroke-width="3" paint-order="stroke"' if halo else ""
    klass = f' class="{css}"' if css else ""
    return (f'<text{klass} x="{x:.1f}" y="{y:.1f}" font-size="{size}" '
            f'text-anchor="{anchor}" fill="{fill}" font-weight="{weight}"{outline}>'
            f'{escape(text)}</text>')


class _Axis:
    def __init__(self, start: float, end: float) -> None:
        span = max(end - start, 1.0)
        pad = span * 0.03
        self.start, self.end = start - pad, end + pad
        self.width = WIDTH - LEFT - RIGHT

    def x(self, t: float) -> float:
        return LEFT + (t - self.start) / (self.end - self.start) * self.width

    def ticks(self) -> list[float]:
        step = _nice_step(self.end - self.start)
        first = math.ceil(self.start / step) * step
        count = int((self.end - first) / step) + 1
        return [first + i * step for i in range(max(count, 0))]


def _lanes(markers: list[Marker], axis: _Axis, lanes: int) -> list[tuple[Marker, int]]:
    """Put each marker's label in the first lane where it does not overlap the last one."""
    ends = [-1e9] * lanes
    placed = []
    for marker in markers:
        x = axis.x(marker.t)
        width = 6.3 * len(marker.label) + 10
        lane = next((i for i in range(lanes) if ends[i] < x), min(range(lanes),
                                                                  key=lambda i: ends[i]))
        ends[lane] = x + width
        placed.append((marker, lane))
    return placed


def timeline_svg(line: Timeline, title: str = "SLI timeline") -> str:
    markers = [m for m in line.markers if m.kind != "verifier"]
    verifiers = [m for m in line.markers if m.kind == "verifier"]
    lanes = 4
    top, fault_h, sli_h, rto_h = 34, 26, 70, 34
    events_top = top + fault_h + sli_h + rto_h + 14
    lane_h = 17
    verifier_top = events_top + lanes * lane_h + 10
    axis_y = verifier_top + 44
    height = axis_y + 34
    deadline = line.deadline
    axis = _Axis(line.start, line.end if deadline is None else max(line.end, deadline))
    parts = [f'<svg role="img" class="chart timeline" '
             f'viewBox="0 0 {WIDTH} {height}" width="100%" '
             f'font-family="system-ui,-apple-system,Segoe UI,sans-serif">',
             f"<title>{escape(title)}</title>",
             f'<rect x="0" y="0" width="{WIDTH}" height="{height}" fill="#ffffff"/>']
    for tick in axis.ticks():
        x = axis.x(tick)
        parts.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{axis_y}" '
                     f'stroke="{COLORS["grid"]}"/>')
        parts.append(_text(x, axis_y + 16, f"{tick:+g} s", anchor="middle", size=10,
                           fill=COLORS["axis"]))
    parts.append(f'<line x1="{LEFT}" y1="{axis_y}" x2="{WIDTH - RIGHT}" y2="{axis_y}" '
                 f'stroke="{COLORS["axis"]}"/>')
    parts.append(_text(WIDTH - RIGHT, axis_y + 30, "seconds from the fault onset",
                       anchor="end", size=10, fill=COLORS["axis"]))
    for label, y in (("fault", top + 17), ("SLI", top + fault_h + sli_h / 2 + 4),
                     ("RTO", top + fault_h + sli_h + 20), ("events", events_top + 12),
                     ("verifiers", verifier_top + 14)):
        parts.append(_text(12, y, label, weight="600", fill=COLORS["axis"]))
    for window in line.windows:
        x1, x2 = axis.x(window.start), axis.x(window.end)
        parts.append(f'<rect class="fault-window" x="{x1:.1f}" y="{top}" '
                     f'width="{max(x2 - x1, 2):.1f}" height="{axis_y - top}" '
                     f'fill="{COLORS["window"]}" fill-opacity="0.22"/>')
        parts.append(f'<rect x="{x1:.1f}" y="{top + 3}" width="{max(x2 - x1, 2):.1f}" '
                     f'height="18" fill="{COLORS["fault"]}" fill-opacity="0.85" rx="3"/>')
        label = window.label + (" (not reverted)" if window.open_ended else "")
        fits = 6.6 * len(label) + 10 <= x2 - x1  # else beside the bar, in the fault's colour
        parts.append(_text(x1 + 5 if fits else max(x2, x1 + 2) + 5, top + 16, label,
                           size=11, fill="#ffffff" if fits else COLORS["fault"], weight="600",
                           halo=not fits))
    parts.extend(_sli(line, axis, top + fault_h, sli_h))
    parts.extend(_rto(line, axis, top + fault_h + sli_h))
    for marker, lane in _lanes(markers, axis, lanes):
        x = axis.x(marker.t)
        y = events_top + lane * lane_h
        color = COLORS.get(marker.kind, "#333")
        parts.append(f'<line x1="{x:.1f}" y1="{top + fault_h}" x2="{x:.1f}" y2="{y + 6}" '
                     f'stroke="{color}" stroke-dasharray="2 3" stroke-opacity="0.7"/>')
        parts.append(f'<circle class="event {marker.kind}" cx="{x:.1f}" cy="{y + 6}" r="4" '
                     f'fill="{color}"/>')
        parts.append(_text(x + 7, y + 10, marker.label, size=11, fill=color))
    parts.extend(_phases(verifiers, axis, verifier_top + 32))
    parts.extend(_deadline(line, axis, top, axis_y))
    for marker in verifiers:
        x = axis.x(marker.t)
        color = {True: COLORS["ok"], False: COLORS["down"], None: COLORS["verifier"]}[marker.ok]
        symbol = {True: "✓", False: "✗", None: "•"}[marker.ok]
        when = f" ({marker.phase})" if marker.phase else ""
        parts.append(f'<g class="verifier"><title>{escape(marker.label)}{when} at '
                     f'{marker.t:+.2f} s</title>'
                     f'<rect x="{x - 7:.1f}" y="{verifier_top}" width="14" height="18" rx="3" '
                     f'fill="{color}"/>'
                     f'{_text(x, verifier_top + 13, symbol, anchor="middle", fill="#fff")}</g>')
    parts.append("</svg>")
    return "".join(parts)


def _sli(line: Timeline, axis: _Axis, y0: float, h: float) -> list[str]:
    up_y, down_y = y0 + 14, y0 + h - 14
    parts = [_text(LEFT - 8, up_y + 4, "up", anchor="end", size=10, fill=COLORS["ok"]),
             _text(LEFT - 8, down_y + 4, "down", anchor="end", size=10, fill=COLORS["down"])]
    if not line.sli:
        said = (f"no SLI was sampled: the run was {line.interrupted}" if line.interrupted
                else "no SLI was sampled in this run")
        parts.append(_text(LEFT + 8, y0 + h / 2 + 4, said, size=11, fill=COLORS["axis"]))
        return parts
    points: list[str] = []
    for i, (t, ok) in enumerate(line.sli):
        x = axis.x(t)
        y = up_y if ok else down_y
        if i:
            points.append(f"{x:.1f},{points[-1].split(',')[1]}")
        points.append(f"{x:.1f},{y:.1f}")
    for (t0, ok), (t1, _) in zip(line.sli, line.sli[1:], strict=False):
        if not ok:
            x0, x1 = axis.x(t0), axis.x(t1)
            parts.append(f'<rect class="sli-down" x="{x0:.1f}" y="{up_y}" '
                         f'width="{max(x1 - x0, 1):.1f}" height="{down_y - up_y}" '
                         f'fill="{COLORS["down"]}" fill-opacity="0.12"/>')
    parts.append(f'<polyline class="sli" points="{" ".join(points)}" fill="none" '
                 f'stroke="{COLORS["ok"]}" stroke-width="2.5"/>')
    parts.append(_text(axis.x(line.sli[-1][0]) - 4, y0 + 8, line.sli_label, size=10,
                       anchor="end", fill=COLORS["axis"]))
    return parts


def _rto(line: Timeline, axis: _Axis, y0: float) -> list[str]:
    parts: list[str] = []
    if line.rto is None:
        return parts
    onset, recovered = line.rto
    x0, x1 = axis.x(onset), axis.x(recovered)
    y = y0 + 14
    color = COLORS["rto"]
    parts.append(f'<g class="rto"><line x1="{x0:.1f}" y1="{y}" x2="{x1:.1f}" y2="{y}" '
                 f'stroke="{color}" stroke-width="2"/>'
                 f'<line x1="{x0:.1f}" y1="{y - 6}" x2="{x0:.1f}" y2="{y + 6}" stroke="{color}" '
                 f'stroke-width="2"/><line x1="{x1:.1f}" y1="{y - 6}" x2="{x1:.1f}" '
                 f'y2="{y + 6}" stroke="{color}" stroke-width="2"/></g>')
    label = f"RTO {line.rto_s:.2f} s" if line.rto_s is not None else "RTO"
    if line.slo_s is not None:
        label += f" (SLO {float(line.slo_s):g} s)"
    parts.append(_text(x1 + 8, y + 4, label, size=12, fill=color, weight="600", halo=True))
    return parts


def _deadline(line: Timeline, axis: _Axis, top: float, bottom: float) -> list[str]:
    """The SLO deadline: a labelled vertical line at the fault onset plus the RTO objective."""
    if line.deadline is None:
        return []
    x = axis.x(line.deadline)
    label = f"SLO deadline +{number(line.deadline)} s"
    anchor = "end" if x > WIDTH - RIGHT - 6.5 * len(label) else "start"
    color = COLORS["rto"]
    return [f'<g class="slo-deadline"><line x1="{x:.1f}" y1="{top - 16}" x2="{x:.1f}" '
            f'y2="{bottom}" stroke="{color}" stroke-width="1.5" stroke-dasharray="6 4"/>'
            + _text(x + (4 if anchor == "start" else -4), top - 6, label, anchor=anchor,
                    size=11, fill=color, weight="600") + "</g>"]


def _phases(verifiers: list[Marker], axis: _Axis, y: float) -> list[str]:
    """"before" and "after" under the steady-state probes' results."""
    parts = []
    for phase in ("before", "after"):
        xs = [axis.x(m.t) for m in verifiers if m.phase == phase]
        if xs:
            parts.append(_text(sum(xs) / len(xs), y, phase, anchor="middle", size=11,
                               fill=COLORS["axis"], weight="600", css="phase"))
    return parts


def objectives_svg(objectives: list[Objective]) -> str:
    """Each measurement on a row of its own, on its own axis in its unit from 0."""
    row_h, top, label_w = 62, 8, 330
    x0, x1 = label_w, WIDTH - 48
    height = top + row_h * max(len(objectives), 1) + 4
    parts = [f'<svg role="img" class="chart objectives" '
             f'viewBox="0 0 {WIDTH} {height}" width="100%" '
             f'font-family="system-ui,-apple-system,Segoe UI,sans-serif">',
             "<title>measurements against objectives</title>"]
    if not objectives:
        parts.append(_text(12, top + 18, "no measurement with an objective in this run",
                           fill=COLORS["axis"]))
    for i, objective in enumerate(objectives):
        y = top + i * row_h
        parts.append(f'<g class="measurement">{_objective_row(objective, y, x0, x1)}</g>')
    parts.append("</svg>")
    return "".join(parts)


def _objective_row(objective: Objective, y: float, x0: float, x1: float) -> str:
    unit = objective.unit
    reference = max(objective.measured, objective.objective or 0.0)
    step = _nice_step(reference * 1.1 or 1.0, 5)
    scale_end = math.ceil(reference * 1.1 / step) * step or step
    def x(value: float) -> float:
        return x0 + value / scale_end * (x1 - x0)

    color = {True: COLORS["ok"], False: COLORS["down"], None: COLORS["verifier"]}[
        objective.met]
    bar_y, base_y = y + 22, y + 40
    parts = [_text(x0 - 14, y + 26, objective.label, anchor="end", weight="600"),
             _text(x0 - 14, y + 43, objective.verdict(), anchor="end", fill=color,
                   weight="600" if objective.met is False else "normal", css="verdict")]
    count = round(scale_end / step)
    for k in range(count + 1):
        tick = k * step
        tx = x(tick)
        parts.append(f'<line x1="{tx:.1f}" y1="{base_y}" x2="{tx:.1f}" y2="{base_y + 4}" '
                     f'stroke="{COLORS["axis"]}"/>')
        parts.append(_text(tx, base_y + 15, f"{number(tick)} {unit}" if k else "0",
                           anchor="middle", size=10, fill=COLORS["axis"]))
    parts.append(f'<line x1="{x0}" y1="{base_y}" x2="{x1:.1f}" y2="{base_y}" '
                 f'stroke="{COLORS["axis"]}"/>')
    end = x(objective.measured)
    parts.append(f'<rect class="objective" x="{x0}" y="{bar_y}" '
                 f'width="{max(end - x0, 2):.1f}" height="14" rx="2" fill="{color}"/>')
    if objective.objective is not None:
        xo = x(objective.objective)
        label = f"objective {number(objective.objective)} {unit}"
        anchor = "end" if xo > x1 - 6 * len(label) else "middle"
        parts.append(f'<line class="objective-mark" x1="{xo:.1f}" y1="{y + 12}" '
                     f'x2="{xo:.1f}" y2="{base_y + 4}" stroke="{COLORS["axis"]}" '
                     f'stroke-width="2" stroke-dasharray="4 3"/>')
        parts.append(_text(xo + (4 if anchor == "end" else 0), y + 10, label,
                           anchor=anchor, size=10, fill=COLORS["axis"]))
    parts.append(_text(max(end, x0 + 2) + 5, bar_y + 11, f"{number(objective.measured)} {unit}",
                       size=11, fill=color, weight="600", halo=True, css="measured"))
    return "".join(parts)
