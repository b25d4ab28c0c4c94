"""Inline SVG charts for the HTML report: no script, no font or image to fetch.

``timeline_svg`` draws the run on one time axis (seconds from the fault onset): fault
windows shaded, the SLI as a step line (up/down), the RTO as a bracket from the onset to
recovery, the SLO deadline (onset + the RTO objective) as a labelled vertical line, alert,
re-shard and fault events as labelled markers (each with a dotted guide up to the SLI,
laid out so no guide or vertical line crosses a label), verifier results with the
steady-state probes labelled "before" and "after", and a legend of every mark. It is for
a run with a fault; a run without one has no onset to draw from. ``objectives_svg`` gives
each measurement a row of its own with its own axis in its unit from 0: the measured
value as a bar, the objective as a marked line, and whether it was met or missed by how
much.
"""

import math
from html import escape

from gameday.report.timeline import Marker, Objective, Timeline, number

WIDTH = 960
LEFT, RIGHT = 120, 24
COLORS = {"fault": "#c62828", "alert": "#ef6c00", "reshard": "#1565c0", "sli": "#ad1457",
          "verifier": "#455a64", "ok": "#2e7d32", "down": "#c62828", "grid": "#e3e7ee",
          "axis": "#5f6b7a", "window": "#ef9a9a", "rto": "#6a1b9a", "recovered": "#00838f"}


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


_LABEL_PX = 6.3  # the width of one character of an 11 px label, near enough


def _lanes(markers: list[Marker], axis: _Axis,
           avoid: list[float]) -> list[tuple[Marker, int, str]]:
    """Give each marker a lane and a side ("start": its label right of it, "end": left):
    the first lane where its label overlaps no other label and covers no ``avoid`` x (a
    vertical line such as the SLO deadline), inside the plot; a new lane when none has
    room, so labels never overlap."""
    taken: list[list[tuple[float, float]]] = []
    placed = []
    for marker in markers:
        x = axis.x(marker.t)
        width = _LABEL_PX * len(marker.label) + 12
        sides = [(side, span) for side, span in (("start", (x - 6, x + width)),
                                                 ("end", (x - width, x + 6)))
                 if span[0] >= LEFT - 8 and span[1] <= WIDTH - 4
                 and not any(span[0] < a < span[1] for a in avoid)] or [
            ("start", (x - 6, x + width))]
        lane, side, span = next(
            ((lane, side, span) for lane in range(len(taken)) for side, span in sides
             if not any(a < span[1] and span[0] < b for a, b in taken[lane])),
            (len(taken), *sides[0]))
        if lane == len(taken):
            taken.append([])
        taken[lane].append(span)
        placed.append((marker, lane, side))
    return placed


def _spread(xs: list[float], gap: float) -> list[float]:
    """``xs`` (ascending) moved right just enough that neighbours are ``gap`` apart."""
    out: list[float] = []
    for x in xs:
        out.append(max(x, out[-1] + gap) if out else x)
    return out


def timeline_svg(line: Timeline, title: str = "SLI timeline") -> str:
    """The run on one time axis. Each event's dotted guide runs from the SLI band down
    to the top of the events band, where the event sits in a lane of its own with its
    label; so no guide crosses a label, and a legend under the axis says what every mark
    means."""
    markers = [m for m in line.markers if m.kind != "verifier"]
    verifiers = [m for m in line.markers if m.kind == "verifier"]
    deadline = line.deadline
    axis = _Axis(line.start, line.end if deadline is None else max(line.end, deadline))
    placed = _lanes(markers, axis, [] if deadline is None else [axis.x(deadline)])
    lanes = max([4, *(lane + 1 for _, lane, _ in placed)])
    top, fault_h, sli_h, lane_h, rto_h = 34, 26, 70, 17, 34
    events_top = top + fault_h + sli_h + 10
    rto_top = events_top + lanes * lane_h + 2
    verifier_top = rto_top + rto_h + 8
    axis_y = verifier_top + 44
    legend, legend_h = _legend(axis_y + 44)
    height = axis_y + 44 + legend_h
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
                     ("events", events_top + 12), ("RTO", rto_top + 18),
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
    for marker in markers:  # the guides first: every label is drawn over them
        x = axis.x(marker.t)
        color = COLORS.get(marker.kind, "#333")
        parts.append(f'<line class="guide" x1="{x:.1f}" y1="{top + fault_h + 13}" '
                     f'x2="{x:.1f}" y2="{events_top - 3}" stroke="{color}" '
                     'stroke-dasharray="2 3" stroke-opacity="0.8"/>')
    parts.extend(_deadline(line, axis, top, axis_y))
    parts.extend(_sli(line, axis, top + fault_h, sli_h))
    parts.extend(_rto(line, axis, rto_top))
    for marker, lane, side in placed:
        x = axis.x(marker.t)
        y = events_top + lane * lane_h
        color = COLORS.get(marker.kind, "#333")
        parts.append(f'<circle class="event {marker.kind}" cx="{x:.1f}" cy="{y + 6}" r="4" '
                     f'fill="{color}"/>')
        parts.append(_text(x + 7 if side == "start" else x - 7, y + 10, marker.label,
                           size=11, fill=color, anchor=side, halo=True, css="event-label"))
    parts.extend(_phases(verifiers, axis, verifier_top + 32))
    spread = _spread([axis.x(m.t) for m in verifiers], 16)
    for marker, x in zip(verifiers, spread, strict=True):
        color = {True: COLORS["ok"], False: COLORS["down"], None: COLORS["verifier"]}[marker.ok]
        symbol = {True: "✓", False: "✗", None: "•"}[marker.ok]
        when = f" ({marker.phase})" if marker.phase else ""
        verdict = {True: "passed", False: "failed", None: "recorded, no verdict"}[marker.ok]
        parts.append(f'<g class="verifier"><title>{escape(marker.label)}{when} at '
                     f'{marker.t:+.2f} s: {verdict}</title>'
                     f'<rect x="{x - 7:.1f}" y="{verifier_top}" width="14" height="18" rx="3" '
                     f'fill="{color}"/>'
                     f'{_text(x, verifier_top + 13, symbol, anchor="middle", fill="#fff")}</g>')
    parts.extend(legend)
    parts.append("</svg>")
    return "".join(parts)


def _legend(y: float) -> tuple[list[str], float]:
    """What every mark of the timeline means, in rows that wrap at the chart's width;
    the parts and their height."""
    def box(color: str, symbol: str) -> str:
        return (f'<rect x="0" y="-11" width="14" height="16" rx="3" fill="{color}"/>'
                + _text(7, 1, symbol, anchor="middle", fill="#fff"))

    def dot(color: str) -> str:
        return f'<circle cx="6" cy="-3" r="4" fill="{color}"/>'

    items = [
        (f'<rect x="0" y="-11" width="14" height="14" fill="{COLORS["window"]}" '
         'fill-opacity="0.45"/>', "fault active"),
        (f'<polyline points="0,-10 7,-10 7,0 14,0" fill="none" stroke="{COLORS["ok"]}" '
         'stroke-width="2"/>', "SLI up / down"),
        (f'<line x1="1" y1="-4" x2="13" y2="-4" stroke="{COLORS["rto"]}" stroke-width="2"/>'
         f'<line x1="1" y1="-9" x2="1" y2="1" stroke="{COLORS["rto"]}" stroke-width="2"/>'
         f'<line x1="13" y1="-9" x2="13" y2="1" stroke="{COLORS["rto"]}" stroke-width="2"/>',
         "RTO: onset to recovery"),
        (f'<line x1="7" y1="-12" x2="7" y2="4" stroke="{COLORS["rto"]}" stroke-width="1.5" '
         'stroke-dasharray="4 3"/>', "SLO deadline"),
        (f'<line x1="7" y1="-12" x2="7" y2="4" stroke="{COLORS["axis"]}" '
         'stroke-dasharray="2 3"/>', "when an event happened"),
        (dot(COLORS["fault"]), "fault injected"), (dot(COLORS["sli"]), "SLI went down"),
        (dot(COLORS["alert"]), "alert fired"), (dot(COLORS["reshard"]), "shard moved"),
        (dot(COLORS["recovered"]), "throughput back to pace"),
        (box(COLORS["ok"], "✓"), "verifier passed"), (box(COLORS["down"], "✗"), "failed"),
        (box(COLORS["verifier"], "•"), "recorded without a verdict (a baseline, such as "
                                       "the golden predictions captured before the fault)"),
    ]
    parts, x, row, row_h = ['<g class="legend">'], 12.0, 0, 20
    for symbol, text in items:
        width = 20 + _LABEL_PX * len(text) + 18
        if x + width > WIDTH - RIGHT and x > 12:
            x, row = 12.0, row + 1
        parts.append(f'<g class="legend-item" transform="translate({x:.1f},{y + row * row_h})">'
                     f'{symbol}{_text(20, 0, text, size=11, fill=COLORS["axis"])}</g>')
        x += width
    parts.append("</g>")
    return parts, (row + 1) * row_h + 6


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
