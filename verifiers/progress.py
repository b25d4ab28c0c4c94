"""A job's progress as a series of ``(time, value)``, from whichever source the experiment
names: its own log, a PromQL expression, or the HTTP progress endpoint the run's SLI
recorder samples; and the fault a measurement is taken against. Shared by the RPO and
throughput verifiers."""

from collections.abc import Mapping
from typing import Any

from gameday.activity import FaultEntry, current
from gameday.errors import GamedayError
from gameday.promql import PromQL, PromQLError, Series
from verifiers.joblog import read_log_lines
from verifiers.sli import PROGRESS_CHANNEL, progress_spec

__all__ = ["fault_end", "fault_entry", "fault_onset", "log_series", "one_series",
           "recorded_progress"]


def one_series(client: PromQL, query: str, start: float, end: float, step_s: float,
               name: str) -> Series | None:
    """The one series ``query`` gives over ``[start, end]`` at ``step_s`` (None when it
    gives none); a one-line error naming ``name`` when it gives more than one."""
    found = client.range(query, start, end, step_s)
    if len(found) > 1:
        raise PromQLError(f"{name} {query!r} returned {len(found)} series "
                          f"({found[0].key}, {found[1].key}, ...); aggregate it to one, "
                          f"e.g. max({query})")
    return found[0] if found else None


def fault_entry(kind: str | None) -> FaultEntry | None:
    """The run's most recently applied fault (of ``kind`` when given), or None."""
    entries = [e for e in current().ledger.entries() if kind is None or e.kind == kind]
    return max(entries, key=lambda e: e.applied_at, default=None)


def fault_onset(kind: str | None) -> float | None:
    """When the run's most recent fault (of ``kind`` when given) was applied."""
    entry = fault_entry(kind)
    return None if entry is None else entry.applied_at


def fault_end(entry: FaultEntry) -> float | None:
    """When the fault stopped acting: its revert, or its own ``duration_s`` (or
    ``hang_s``) run out, whichever came first; None while neither is known."""
    ends = [entry.reverted_at] if entry.reverted_at is not None else []
    for key in ("duration_s", "hang_s"):
        value = entry.params.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
            ends.append(entry.applied_at + float(value))
    return min(ends, default=None)


def log_series(spec: Mapping[str, Any], name: str, *, step: bool = True) -> Series:
    """The lines of the job log ``spec`` names (``{"path", "pattern", "tz"}``) as a
    series of (time, step); with ``step`` False, lines need only a time (value 0 where
    they name no step)."""
    if not isinstance(spec, Mapping) or not {"path", "pattern"} <= set(spec) or \
            not set(spec) <= {"path", "pattern", "tz"}:
        raise GamedayError(f'{name} must be {{"path": FILE, "pattern": REGEX}} and '
                           f'optionally "tz": ZONE')
    tz = spec.get("tz")
    try:
        lines = read_log_lines(str(spec["path"]), str(spec["pattern"]),
                               tz=None if tz is None else str(tz), step_required=step)
    except GamedayError as exc:
        raise GamedayError(f"{name}: {exc}") from None
    return Series({}, tuple((line.t, float(line.step or 0)) for line in lines))


def recorded_progress(spec: Mapping[str, Any]) -> tuple[Series, float]:
    """The run recorder's readings of the progress endpoint ``spec`` names, as a series,
    and the channel's sampling interval (the resolution of each reading)."""
    wanted = progress_spec(spec, "progress_http")
    recorder = current().recorder
    channel = None
    if recorder is not None:
        channel = next((c for c in recorder.channels if c.name == PROGRESS_CHANNEL
                        and c.describe == wanted.describe()), None)
    if recorder is None or channel is None:
        raise GamedayError(
            f"progress_http: the run's SLI recorder does not sample {wanted.url} "
            f"({wanted.field}); give the gameday control sli: {{progress: {{url: "
            f"{wanted.url}, field: {wanted.field}}}}} so progress is on the timeline "
            f"from before the fault")
    readings = recorder.readings(channel.name)
    return Series({}, tuple((r.t, r.value) for r in readings if r.value is not None)), \
        channel.interval_s
