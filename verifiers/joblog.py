"""A training job's own log as a progress source: timestamped lines matched by a regular
expression.

A pattern names the group ``t`` (the line's time: Unix seconds, or ISO 8601 such as
Python logging's ``%(asctime)s``, ``2026-12-02 05:10:19,123``) and, where the line
carries one, ``step``. A time with no zone is read in the zone ``tz`` names (an IANA
name such as ``Europe/Berlin``, or ``UTC``); with no ``tz``, in the host's local zone,
which is what Python logging (and so the Hugging Face ``Trainer`` and Lightning) writes.
"""

import re
from dataclasses import dataclass
from datetime import datetime, tzinfo
from pathlib import Path
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from gameday.errors import GamedayError

__all__ = ["CheckpointStoreError", "LogLine", "LogStep", "log_zone", "read_log_lines",
           "read_log_steps"]


class CheckpointStoreError(GamedayError):
    """A checkpoint store or job log could not be read, or a pattern is unusable."""


@dataclass(frozen=True)
class LogLine:
    """One matching log line: its time, its step when the pattern has one, its number."""

    t: float
    step: int | None
    line: int


@dataclass(frozen=True)
class LogStep:
    """One matching log line that names a step: its time, its step, and where it was."""

    t: float
    step: int
    line: int


def log_zone(name: str | None) -> tzinfo | None:
    """The zone naive times of a log are in: ``name`` (IANA, or ``UTC``), or None for
    the host's local zone; a one-line error for a zone that does not exist."""
    if name is None or name == "local":
        return None
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise CheckpointStoreError(f"log tz {name!r} is not a time zone (an IANA name "
                                   f"such as Europe/Berlin, UTC, or local)") from None


def _timestamp(text: str, zone: tzinfo | None) -> float:
    try:
        return float(text)
    except ValueError:
        pass
    moment = datetime.fromisoformat(text.replace(",", "."))
    if moment.tzinfo is None:
        # (astimezone() on a naive time reads it in the host's local zone)
        moment = moment.replace(tzinfo=zone) if zone is not None else moment.astimezone()
    return moment.timestamp()


def read_log_lines(path: str | Path, pattern: str, *, tz: str | None = None,
                   step_required: bool = False) -> list[LogLine]:
    """The lines of ``path`` matching ``pattern`` (group ``t``; group ``step`` too when
    ``step_required``), in order, naive times read in ``tz`` (default: local)."""
    try:
        compiled = re.compile(pattern)
    except re.error as exc:
        raise CheckpointStoreError(f"log pattern {pattern!r}: {exc}") from None
    wanted = {"t", "step"} if step_required else {"t"}
    if not wanted <= set(compiled.groupindex):
        groups = " and ".join(f"(?P<{name}>...)" for name in sorted(wanted))
        raise CheckpointStoreError(f"log pattern {pattern!r} needs the named group"
                                   f"{'s' if len(wanted) > 1 else ''} {groups}")
    zone = log_zone(tz)
    try:
        text = Path(path).read_text(errors="replace")
    except OSError as exc:
        raise CheckpointStoreError(f"cannot read job log {path}: {exc.strerror}") from None
    has_step = "step" in compiled.groupindex
    lines = []
    # lines end at a newline only (read_text made \r\n and \r one), as an editor and
    # grep -n count them; str.splitlines also cuts at \f, \v, U+0085, U+2028, ...
    for number, line in enumerate(text.split("\n"), start=1):
        match = compiled.search(line)
        if match is None:
            continue
        try:
            step = int(match.group("step")) if has_step and match.group("step") else None
            lines.append(LogLine(_timestamp(match.group("t"), zone), step, number))
        except (ValueError, TypeError):
            raise CheckpointStoreError(
                f"{path}:{number}: cannot read the time {match.group('t')!r}"
                + (f" or step {match.group('step')!r}" if has_step else "")) from None
    return lines


def read_log_steps(path: str | Path, pattern: str, *, tz: str | None = None) -> list[LogStep]:
    """The lines of ``path`` matching ``pattern`` (groups ``t`` and ``step``), in order."""
    return [LogStep(line.t, line.step, line.line) for line in
            read_log_lines(path, pattern, tz=tz, step_required=True) if line.step is not None]
