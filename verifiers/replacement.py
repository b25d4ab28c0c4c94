"""Self-healing as a controller does it: the unit a fault took down (a replica, a pod,
a process) replaced by a new healthy one, within the RTO, the others untouched.

``verify_replacement`` reads the units a controller owns (:mod:`verifiers.units`: its
own API through a JMESPath mapping) every ``interval_s`` from just after the fault, and
:class:`ReplacementCheck` folds each reading into the verdict: when the controller
showed the faulted unit down (the time to detect), when a new unit became ready (the
time to replace), and whether any other unit was disturbed on the way.
"""

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gameday.activity import current, fail, record
from gameday.errors import GamedayError
from verifiers.units import Unit, UnitSnapshot, unit_source

__all__ = ["Instant", "ReplacementCheck", "verify_replacement"]


@dataclass(frozen=True)
class Instant:
    """When something happened: ``t``, known to lie in ``[low, t]``; ``by`` says who
    timed it (``controller``: its own transition time; ``poll``: the reading that first
    showed it, the one before it being ``low``)."""

    t: float
    low: float
    by: str

    def to_json(self, onset: float) -> dict[str, Any]:
        return {"t": self.t, "after_s": round(self.t - onset, 3),
                "after_s_min": round(max(0.0, self.low - onset), 3), "by": self.by}


def _when(unit: Unit, snapshot: UnitSnapshot, previous_t: float, onset: float) -> Instant:
    """When ``unit`` entered the state ``snapshot`` shows: the controller's ``since``
    when it gives one after the onset, else between the previous reading's request
    (``previous_t``: its document, which did not show it, was made after that) and this
    reading's answer (``snapshot.t``: its document was made before it arrived)."""
    if unit.since is not None and unit.since >= onset and unit.since <= snapshot.t + 1.0:
        return Instant(unit.since, unit.since, "controller")
    return Instant(snapshot.t, max(previous_t, onset), "poll")


@dataclass
class ReplacementCheck:
    """The verdict so far on ``faulted`` units, from readings given to :meth:`observe`
    in time order; the first reading sets which units are the others."""

    faulted: set[str]
    onset: float
    replicas: int | None = None  # the units the controller should keep; None: as first read
    others: set[str] = field(default_factory=set)
    detected: Instant | None = None
    replacements: dict[str, Instant] = field(default_factory=dict)
    newcomers: set[str] = field(default_factory=set)
    disturbed: list[str] = field(default_factory=list)
    readings: int = 0
    last: UnitSnapshot | None = None

    def observe(self, snapshot: UnitSnapshot) -> None:
        units = snapshot.by_id()
        previous_t = self.last.requested if self.last is not None else self.onset
        if self.last is None:
            # (the first reading comes after the fault: a unit not ready, or one the
            # controller says changed state since the onset, may already be its response)
            self.others = {name for name, unit in units.items() if name not in self.faulted
                           and unit.ready and (unit.since is None or unit.since < self.onset)}
            if self.replicas is None:
                self.replicas = len(self.others) + len(self.faulted)
        self.readings += 1
        if self.detected is None:
            down = [units.get(name) for name in sorted(self.faulted)
                    if name not in units or not units[name].ready]
            if down:
                self.detected = self._detection(down[0], units, snapshot, previous_t)
        for name in sorted(self.others):
            unit = units.get(name)
            if unit is None or not unit.ready:
                what = "gone" if unit is None else f"not ready ({unit.state})"
                note = f"unit {name} {what} at +{snapshot.t - self.onset:.1f} s"
                if not any(entry.startswith(f"unit {name} ") for entry in self.disturbed):
                    self.disturbed.append(note)
        for name, unit in units.items():
            if name in self.others or name in self.faulted:
                continue
            self.newcomers.add(name)
            if unit.ready and name not in self.replacements:
                self.replacements[name] = _when(unit, snapshot, previous_t, self.onset)
        if len(self.newcomers) > len(self.faulted) and not any(
                entry.startswith("new units ") for entry in self.disturbed):
            self.disturbed.append(
                f"new units {', '.join(sorted(self.newcomers))} for {len(self.faulted)} "
                f"faulted at +{snapshot.t - self.onset:.1f} s (another unit was replaced)")
        self.last = snapshot

    def _detection(self, unit: Unit | None, units: dict[str, Unit], snapshot: UnitSnapshot,
                   previous_t: float) -> Instant:
        """When the controller showed a faulted unit down: its own transition time for
        the unit (``unit``: still listed, not ready), or for a gone unit the earliest
        transition time of a new unit it started since the onset (it acted on the
        death), else the reading."""
        if unit is not None:
            return _when(unit, snapshot, previous_t, self.onset)
        started = [u.since for name, u in units.items()
                   if name not in self.others and name not in self.faulted
                   and u.since is not None and self.onset <= u.since <= snapshot.t + 1.0]
        if started:
            return Instant(min(started), min(started), "controller")
        return Instant(snapshot.t, max(previous_t, self.onset), "poll")

    @property
    def faulted_still_ready(self) -> list[str]:
        units = self.last.by_id() if self.last is not None else {}
        return sorted(name for name in self.faulted if name in units and units[name].ready)

    @property
    def ready_now(self) -> int:
        return sum(unit.ready for unit in (self.last.units if self.last else ()))

    @property
    def replaced(self) -> bool:
        """Every faulted unit is down and as many new units are ready, and the
        controller keeps its count of ready units."""
        return (self.detected is not None and not self.faulted_still_ready
                and len(self.replacements) >= len(self.faulted)
                and self.ready_now >= (self.replicas or 0))

    @property
    def replaced_at(self) -> Instant | None:
        """When the last of the needed replacements became ready."""
        if not self.replaced:
            return None
        firsts = sorted(self.replacements.values(), key=lambda instant: instant.t)
        return firsts[len(self.faulted) - 1]


def _faulted_units(entries: Iterable[Any]) -> set[str]:
    """The unit ids the most recent fault names: the pids its process fault signalled,
    or the pod or replica of its target."""
    for entry in reversed(list(entries)):
        found = {str(item["pid"]) for item in entry.details.get("processes", [])
                 if isinstance(item, Mapping) and item.get("pid") is not None}
        for key in ("pod", "replica", "pid", "name"):
            value = entry.target.get(key) if isinstance(entry.target, Mapping) else None
            if isinstance(value, str | int) and not isinstance(value, bool):
                found.add(str(value))
                break
        if found:
            return found
    return set()


def verify_replacement(units: dict[str, Any], faulted: str | list[str] | None = None,
                       rto_s: float | None = None, timeout_s: float = 60.0,
                       interval_s: float = 0.2, replicas: int | None = None,
                       fault_kind: str | None = None) -> dict[str, Any]:
    """Verify that the controller replaced the unit the fault took down with a new
    healthy one, within the RTO, leaving the others untouched.

    ``units`` is where the controller's units are read (``verifiers.units``): ``{"url":
    URL, "mapping": "ray_serve" | {units, id, state, ready | ready_states, since}}``,
    ``{"kubernetes": {"namespace", "selector", ...}}`` (a Deployment's or ReplicaSet's
    pods) or ``{"kserve": {"namespace", "name", ...}}``. ``faulted`` names the unit(s)
    (ids as the mapping reads them); by default those of the run's most recent fault
    (of kind ``fault_kind``): the pids a process fault signalled, or its target's
    ``pod`` / ``replica``.

    The others are the units of the first reading that are ready and (by the
    controller's ``since``, where given) unchanged since the onset; each must stay
    listed and ready, and no more new units may appear than units were faulted; the check
    passes once every faulted unit is gone or not ready, as many new units are ready,
    and at least ``replicas`` units (default: as many as were first read, the faulted
    included) are ready. The time to detect is from the fault onset to the controller
    showing the faulted unit down, the time to replace to the new unit being ready:
    by the controller's own transition times where the mapping has ``since``, else by
    the arrival of the reading that first showed it (``after_s_min``: when the reading
    before it was asked for; the transition lies between, whatever the API's latency).
    The objective is ``rto_s`` (default: the experiment's ``slo.rto_s``) on the time to
    replace.

    Returns ``{"units", "faulted", "onset", "others", "detected", "time_to_detect_s",
    "replaced_by", "replaced_at", "time_to_replace_s", "time_to_replace_s_min",
    "timed_by", "readings", "rto_s", "met"}``; raises ``ActivityFailed`` with one line,
    e.g. ``unit 4121 not replaced within 60 s (ready: 4117, 4119; faulted still
    ready: 4121)`` or ``replaced 4121 by 4188 in 34.2 s > rto 20 s``.
    """
    verifier = "replacement.verify_replacement"
    session = current()
    rto = rto_s if rto_s is not None else session.extension.slo.rto_s
    measurement: dict[str, Any] = {"units": units, "rto_s": rto}
    try:
        if timeout_s <= 0 or interval_s <= 0:
            raise GamedayError(f"need timeout_s and interval_s > 0, got {timeout_s:g} and "
                               f"{interval_s:g}")
        source = unit_source(units)
    except GamedayError as exc:
        fail(verifier, f"verify_replacement: {exc}", measurement)
    measurement["units"] = source.describe()
    entries = [entry for entry in session.ledger.entries()
               if fault_kind is None or entry.kind == fault_kind]
    onset = max((entry.applied_at for entry in entries), default=None)
    names = ({faulted} if isinstance(faulted, str) else set(map(str, faulted))
             if faulted is not None else _faulted_units(entries))
    measurement["faulted"] = sorted(names)
    if onset is None:
        fail(verifier, "verify_replacement needs a fault onset: no fault"
                       + (f" of kind {fault_kind}" if fault_kind else "")
                       + " was applied in this session", measurement)
    if not names:
        fail(verifier, "verify_replacement: the fault names no unit (no pid, pod or "
                       "replica); give faulted: ID", measurement)
    check = ReplacementCheck(faulted=names, onset=onset, replicas=replicas)
    clock = session.clock
    deadline = clock.monotonic() + timeout_s
    while True:
        try:
            sent = clock.now()
            read = source.read()
            check.observe(UnitSnapshot(clock.now(), read, sent=sent))
        except GamedayError as exc:
            fail(verifier, f"verify_replacement: {exc}", measurement)
        if check.replaced or check.disturbed or clock.monotonic() >= deadline:
            break
        clock.sleep(min(interval_s, max(0.0, deadline - clock.monotonic())))
    replaced_at = check.replaced_at
    ready = sorted(unit.id for unit in (check.last.units if check.last else ()) if unit.ready)
    measurement.update({
        "onset": onset, "others": sorted(check.others), "readings": check.readings,
        "detected": None if check.detected is None else check.detected.to_json(onset),
        "time_to_detect_s": None if check.detected is None else
        round(check.detected.t - onset, 3),
        "replaced_by": sorted(check.replacements), "ready": ready,
        "replaced_at": None if replaced_at is None else replaced_at.t,
        "time_to_replace_s": None if replaced_at is None else round(replaced_at.t - onset, 3),
        "time_to_replace_s_min": None if replaced_at is None else
        round(max(0.0, replaced_at.low - onset), 3),
        "timed_by": None if replaced_at is None else replaced_at.by,
        "disturbed": list(check.disturbed)})
    faulted_text = ", ".join(sorted(names))
    if check.disturbed:
        measurement["met"] = False
        fail(verifier, f"another unit was disturbed while {faulted_text} was replaced: "
                       f"{check.disturbed[0]}", measurement)
    if replaced_at is None:
        measurement["met"] = False
        still = check.faulted_still_ready
        fail(verifier, f"unit {faulted_text} not replaced within {timeout_s:g} s (ready: "
                       f"{', '.join(ready) or 'none'}"
                       + (f"; faulted still ready: {', '.join(still)}" if still else "")
                       + ("; the controller never showed it down" if check.detected is None
                          else "") + ")", measurement)
    took = replaced_at.t - onset
    new = ", ".join(sorted(check.replacements))
    detect = ("" if check.detected is None else
              f"; detected in {check.detected.t - onset:.1f} s ({check.detected.by})")
    measurement["met"] = None if rto is None else took <= rto
    if rto is not None and took > rto:
        fail(verifier, f"replaced {faulted_text} by {new} in {took:.1f} s > rto {rto:g} s "
                       f"(missed by {took - rto:.1f} s){detect}", measurement)
    bound = f" <= rto {rto:g} s" if rto is not None else " (no rto)"
    record(verifier, measurement["met"], measurement,
           f"replaced {faulted_text} by {new} in {took:.1f} s{bound} (timed by the "
           f"{replaced_at.by}){detect}; {len(check.others)} other units untouched")
    return measurement
