"""Inline SVG charts for the HTML report: no script, no font or image to fetch.

``timeline_svg`` draws the run on one time axis (seconds from the fault onset): fault
windows shaded, the SLI as a step line (up/down), the RTO as a bracket from the onset to
recovery with the SLO deadline, and alert, re-shard, fault and verifier events as
labelled markers. ``objectives_svg`` draws each measured value against its objective.
"""

import math
from html import escape

from gameday.report.timeline import Marker, Objective, Timeline

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
          fill: str = "#1d2330", weight: str = "normal") -> str:
    return (f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}" '
            f'fill="{fill}" font-weight="{weight}">{escape(text)}</text>')


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
    axis_y = verifier_top + 30
    height = axis_y + 34
    axis = _Axis(line.start, line.end)
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
        parts.append(_text(x1 + 5, top + 16, window.label + (" (not reverted)"
                                                            if window.open_ended else ""),
                           size=11, fill="#ffffff", weight="600"))
    parts.extend(_sli(line, axis, top + fault_h, sli_h))
    parts.extend(_rto(line, axis, top + fault_h + sli_h, axis_y))
    for marker, lane in _lanes(markers, axis, lanes):
        x = axis.x(marker.t)
        y = events_top + lane * lane_h
        color = COLORS.get(marker.kind, "#333")
        parts.append(f'<line x1="{x:.1f}" y1="{top + fault_h}" x2="{x:.1f}" y2="{y + 6}" '
                     f'stroke="{color}" stroke-dasharray="2 3" stroke-opacity="0.7"/>')
        parts.append(f'<circle class="event {marker.kind}" cx="{x:.1f}" cy="{y + 6}" r="4" '
                     f'fill="{color}"/>')
        parts.append(_text(x + 7, y + 10, marker.label, size=11, fill=color))
    for marker in verifiers:
        x = axis.x(marker.t)
        color = {True: COLORS["ok"], False: COLORS["down"], None: COLORS["verifier"]}[marker.ok]
        symbol = {True: "✓", False: "✗", None: "•"}[marker.ok]
        parts.append(f'<g class="verifier"><title>{escape(marker.label)} at '
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
        parts.append(_text(LEFT + 8, y0 + h / 2 + 4, "no SLI was sampled in this run",
                           size=11, fill=COLORS["axis"]))
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


def _rto(line: Timeline, axis: _Axis, y0: float, bottom: float) -> list[str]:
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
        deadline = onset + float(line.slo_s)
        label += f" (SLO {float(line.slo_s):g} s)"
        if deadline <= axis.end:
            xd = axis.x(deadline)
            parts.append(f'<line class="slo" x1="{xd:.1f}" y1="{y0 - 70}" x2="{xd:.1f}" '
                         f'y2="{bottom}" stroke="{color}" stroke-dasharray="6 4"/>')
            parts.append(_text(xd - 4, y0 - 58, "SLO deadline", anchor="end", size=10,
                               fill=color))
    parts.append(_text(x1 + 8, y + 4, label, size=12, fill=color, weight="600"))
    return parts


def objectives_svg(objectives: list[Objective]) -> str:
    """Each measurement as a bar against its objective (the dashed line at 100%)."""
    row_h, top = 30, 12
    height = top + row_h * max(len(objectives), 1) + 12
    label_w = 230
    bar_w = WIDTH - label_w - 180
    parts = [f'<svg role="img" class="chart objectives" '
             f'viewBox="0 0 {WIDTH} {height}" width="100%" '
             f'font-family="system-ui,-apple-system,Segoe UI,sans-serif">',
             "<title>measurements against objectives</title>"]
    if not objectives:
        parts.append(_text(12, top + 18, "no measurement with an objective in this run",
                           fill=COLORS["axis"]))
    scale_max = max([1.25] + [o.measured / o.objective for o in objectives
                              if o.objective]) if objectives else 1.25
    for i, objective in enumerate(objectives):
        y = top + i * row_h
        parts.append(_text(label_w - 10, y + 16, objective.label, anchor="end"))
        reference = objective.objective or max(objective.measured, 1e-9)
        fraction = objective.measured / reference / scale_max
        color = {True: COLORS["ok"], False: COLORS["down"], None: COLORS["verifier"]}[
            objective.met]
        parts.append(f'<rect class="objective" x="{label_w}" y="{y + 4}" '
                     f'width="{max(fraction * bar_w, 2):.1f}" height="16" rx="3" '
                     f'fill="{color}"/>')
        if objective.objective:
            xo = label_w + bar_w / scale_max
            parts.append(f'<line x1="{xo:.1f}" y1="{y}" x2="{xo:.1f}" y2="{y + 24}" '
                         f'stroke="#1d2330" stroke-dasharray="4 3"/>')
            text = f"{objective.measured:g} {objective.unit} of {objective.objective:g} " \
                   f"{objective.unit}"
        else:
            text = f"{objective.measured:g} {objective.unit} (no objective)"
        parts.append(_text(label_w + bar_w + 12, y + 16, text, fill=COLORS["axis"]))
    parts.append("</svg>")
    return "".join(parts)
