"""``gameday score DIR``: a resilience score built only from verified evidence.

The formula (docs/gamedays.md), per group of scenarios (a service, a coverage cell, all):

- a *scenario* is an experiment file; it counts once, by its newest verified run;
- its *weight* is its SLO severity's: the experiment's tag ``severity:NAME`` (``warning``
  when it has none), weighted by :attr:`Policy.weights` (``warning`` 1, ``critical`` 3);
- its *points*: ``weight x passed x 0.5 ** (age / half_life)``, where ``passed`` is 1 or 0
  (the run's verdict) and ``age`` the days since the run ended (a pass fades by half every
  half-life, 30 days unless told: stale evidence is worth less than fresh);
- a required scenario that did not run (fewer scenarios in a required coverage cell than
  the requirement asks) is a *not run* point: weight 1 (the ``warning`` weight), 0 points;
- the group's score is ``100 x sum(points) / sum(weights)``, None for a group with neither
  scenarios nor requirements.

A scenario's *service* is the first group of a services file (:func:`load_services`,
``services: {NAME: [glob, ...]}`` over experiment file paths) that matches its experiment
file, else the value of its experiment's first ``service:NAME`` tag (the prefix is
:attr:`Policy.service_tag`), else ``untagged``. Only journals that verified are
read (the caller passes them); the journals that did not are listed with the reason and
neither lower nor raise anything. Every point names the journal (path and SHA-256) it
came from.
"""

import datetime
import fnmatch
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gameday.errors import InvalidInput
from gameday.evidence.summary import JournalSummary
from gameday.experiment.docfields import Document
from gameday.gamedays.playbook import Requirement

DEFAULT_WEIGHTS = {"warning": 1.0, "critical": 3.0}
DEFAULT_SEVERITY = "warning"
SEVERITY_TAG = "severity:"
UNTAGGED = "untagged"
DAY_S = 86_400.0


@dataclass(frozen=True)
class Policy:
    """How points are weighed and grouped: severity weights, the staleness half-life, the
    service tag, and configured services (name -> globs over experiment files)."""

    weights: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_WEIGHTS))
    half_life_days: float = 30.0
    service_tag: str = "service:"
    services: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def service_of(self, summary: JournalSummary) -> str:
        for name, patterns in self.services:
            if any(fnmatch.fnmatchcase(summary.experiment_file, p) for p in patterns):
                return name
        return _tagged(summary.tags, self.service_tag) or UNTAGGED


def load_services(path: Path) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """A services file: ``services: {NAME: [GLOB, ...]}``, globs over the experiment file
    a journal records (``experiments/inference-*.yaml``); in file order."""
    doc = Document.read(path)
    doc.only_keys("", ["services"])
    doc.errors.raise_first()
    services = doc.mapping("services", required=True)
    if not services:
        doc.fail("names no service", "services")
    groups = []
    for name in services:
        patterns = doc.sequence(f"services.{name}", required=True)
        for n, pattern in enumerate(patterns):
            if not isinstance(pattern, str) or not pattern:
                doc.fail(f"must be a glob over experiment files, got {pattern!r}",
                         f"services.{name}[{n}]")
        if not patterns:
            doc.fail("lists no experiment glob", f"services.{name}")
        groups.append((str(name), tuple(patterns)))
    return tuple(groups)


def parse_weights(text: str) -> dict[str, float]:
    """``warning=1,critical=3`` as a mapping; :class:`InvalidInput` naming the bad item."""
    weights: dict[str, float] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, sep, value = item.partition("=")
        try:
            weight = float(value) if sep and name.strip() else -1.0
        except ValueError:
            weight = -1.0
        if not weight >= 0 or weight == float("inf"):
            raise InvalidInput(f"{item!r} is not SEVERITY=WEIGHT with a weight >= 0",
                               path="--weights")
        weights[name.strip()] = weight
    if DEFAULT_SEVERITY not in weights:
        weights[DEFAULT_SEVERITY] = DEFAULT_WEIGHTS[DEFAULT_SEVERITY]
    return weights


@dataclass(frozen=True)
class Point:
    """One scenario's contribution, traceable to its journal (``None`` for not run)."""

    scenario: str
    service: str
    fault: str
    layer: str
    severity: str
    weight: float
    passed: bool
    age_days: float | None
    decay: float
    points: float
    journal: str | None
    sha256: str | None

    def to_json(self) -> dict[str, Any]:
        return {"scenario": self.scenario, "service": self.service, "fault": self.fault,
                "layer": self.layer, "severity": self.severity, "weight": self.weight,
                "passed": self.passed, "age_days": _round(self.age_days),
                "decay": round(self.decay, 4), "points": round(self.points, 4),
                "journal": self.journal, "sha256": self.sha256}


@dataclass(frozen=True)
class GroupScore:
    """A service's, a cell's or the overall score and the points it is made of."""

    name: str
    points: tuple[Point, ...]

    @property
    def weight(self) -> float:
        return sum(p.weight for p in self.points)

    @property
    def value(self) -> float | None:
        """0-100, or None when nothing counts here."""
        total = self.weight
        return None if not total else 100.0 * sum(p.points for p in self.points) / total

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "score": _round(self.value), "weight": self.weight,
                "scenarios": sum(1 for p in self.points if p.journal is not None),
                "not_run": sum(1 for p in self.points if p.journal is None),
                "points": [p.to_json() for p in self.points]}


@dataclass(frozen=True)
class Score:
    overall: GroupScore
    services: tuple[GroupScore, ...]
    cells: tuple[GroupScore, ...]
    rejected: tuple[tuple[str, str], ...]  # (journal, reason): listed, never counted
    policy: Policy
    generated_at: float

    def to_json(self) -> dict[str, Any]:
        return {"generated_at": _iso(self.generated_at),
                "formula": {"weights": self.policy.weights,
                            "half_life_days": self.policy.half_life_days,
                            "service_tag": self.policy.service_tag,
                            "services": {name: list(globs)
                                         for name, globs in self.policy.services},
                            "not_run": "weight 1, 0 points"},
                "overall": self.overall.to_json(),
                "services": [g.to_json() for g in self.services],
                "cells": [g.to_json() for g in self.cells],
                "rejected": [{"journal": j, "reason": r} for j, r in self.rejected]}

    def lines(self) -> list[str]:
        """The text report: overall, per service, per cell, and what was not counted."""
        out = [f"score: overall {_text(self.overall.value)} over "
               f"{len(self.overall.points)} points"]
        out += [f"score: service {g.name}: {_text(g.value)}" for g in self.services]
        out += [f"score: cell {g.name}: {_text(g.value)}" for g in self.cells]
        out += [f"score: rejected {j} (not counted): {r}" for j, r in self.rejected]
        return out


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def _text(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _iso(epoch: float) -> str:
    return datetime.datetime.fromtimestamp(epoch, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _tagged(tags: Iterable[str], prefix: str) -> str | None:
    return next((tag[len(prefix):] for tag in tags if tag.startswith(prefix)
                 and len(tag) > len(prefix)), None)


def _latest(summaries: Iterable[JournalSummary]) -> list[JournalSummary]:
    """Each scenario's newest run (ties: the later journal name, for one answer)."""
    latest: dict[str, JournalSummary] = {}
    for summary in summaries:
        previous = latest.get(summary.scenario)
        if previous is None or (summary.ended_at, summary.path) >= (previous.ended_at,
                                                                     previous.path):
            latest[summary.scenario] = summary
    return [latest[name] for name in sorted(latest)]


def _point(summary: JournalSummary, policy: Policy, now: float) -> Point:
    severity = _tagged(summary.tags, SEVERITY_TAG) or DEFAULT_SEVERITY
    weight = policy.weights.get(severity, policy.weights[DEFAULT_SEVERITY])
    age = max(0.0, now - summary.ended_at) / DAY_S
    decay = 0.5 ** (age / policy.half_life_days) if policy.half_life_days > 0 else 1.0
    return Point(summary.scenario, policy.service_of(summary),
                 summary.fault, summary.layer, severity, weight, summary.passed, age, decay,
                 weight * decay if summary.passed else 0.0, summary.path, summary.sha256)


def _not_run(requirement: Requirement, count: int, policy: Policy) -> list[Point]:
    weight = policy.weights[DEFAULT_SEVERITY]
    return [Point(f"not run: {requirement.describe()} #{n}", UNTAGGED, requirement.fault,
                  requirement.layer, DEFAULT_SEVERITY, weight, False, None, 0.0, 0.0, None,
                  None) for n in range(1, count + 1)]


def compute(verified: Iterable[JournalSummary], *, rejected: Sequence[tuple[str, str]] = (),
            requirements: Sequence[Requirement] = (), policy: Policy | None = None,
            now: float) -> Score:
    """The score of the ``verified`` journals (only those) against ``requirements``."""
    policy = policy or Policy()
    if policy.half_life_days <= 0:
        raise InvalidInput(f"must be > 0 days, got {policy.half_life_days:g}",
                           path="--half-life-days")
    latest = _latest(verified)
    scenarios = [_point(summary, policy, now) for summary in latest]
    points = list(scenarios)
    for requirement in requirements:
        newer_than = (now - requirement.max_age_days * DAY_S
                      if requirement.max_age_days is not None else float("-inf"))
        ran = {p.scenario for p, s in zip(scenarios, latest, strict=True)
               if (p.fault, p.layer) == requirement.cell and s.ended_at >= newer_than
               and (s.real or not requirement.real)}
        points += _not_run(requirement, max(0, requirement.scenarios - len(ran)), policy)
    services: dict[str, list[Point]] = {}
    cells: dict[str, list[Point]] = {}
    for point in points:
        if point.journal is not None:
            services.setdefault(point.service, []).append(point)
        cells.setdefault(f"{point.fault}/{point.layer}", []).append(point)
    return Score(GroupScore("overall", tuple(points)),
                 tuple(GroupScore(name, tuple(group)) for name, group in sorted(services.items())),
                 tuple(GroupScore(name, tuple(group)) for name, group in sorted(cells.items())),
                 tuple(rejected), policy, now)
