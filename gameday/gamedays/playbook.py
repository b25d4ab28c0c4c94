"""Playbooks: game days, release gates and audit runs as one validated YAML file.

A playbook is an ordered list of experiments (each with its own variables and an
expected outcome), or a draw of N experiments from a fault mix, or both (the listed
ones run first), plus what to do on a failure, an optional schedule, gate thresholds,
the fleet to project costs onto, and the coverage an audit requires.

```yaml
version: 1
title: Release gate
description: the resilience checks a release must pass
target: lab                        # optional: overrides every experiment's target
on_failure: continue               # or stop: skip the rest after the first unexpected result
stop_on:                           # optional: Alertmanager alerts that stop the game day
  alertmanager: http://alertmanager:9093   # (docs/safety.md, "Stop conditions from alerts")
  alerts: [{alertname: CheckoutErrorBudgetBurn, severity: critical}]
variables: {}                      # --var KEY=VALUE for every experiment
experiments:
  - path: ../experiments/gpu-ecc-dbe-reshard.yaml     # relative to this file
    name: ecc-dbe-reshard          # optional; default: the file's stem
    variables: {}
  - path: ../experiments/gpu-silent-corruption.yaml
    expect: fail                   # a known weakness: the gate passes while it still fails
draw: {mix: fault-mix/llama3.yaml, count: 3, seed: 7}
schedule: {cron: "0 10 * * 3", timezone: UTC}
gate: {rto_max_s: 20, rto_p95_s: 15, rpo_max_s: 60, reshard_max_s: 10, detect_max_s: 5,
       min_ettr: 0.99, min_pass_rate: 1.0}
costs: {fleet_gpus: 16384, interruptions_per_gpu_day: 0.000474, rpo_s: 0}   # rpo_s: used
                                   # when no experiment measured an RPO (seconds redone)
coverage:
  require:
    - {fault: gpu.ecc, layer: device, scenarios: 1, label: GPU ECC errors}
```

Every experiment is loaded and validated when the playbook is, so a playbook with one
bad experiment fails (exit 2) before anything is injected.
"""

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from croniter import croniter

from gameday.errors import InvalidInput, checked
from gameday.experiment.docfields import Document, join
from gameday.experiment.extension import COVERAGE_LAYERS
from gameday.gamedays.costs import (
    LLAMA3_RATE_PER_GPU_DAY,
    LLAMA3_SOURCE,
    WORKLOADS,
    Fleet,
    no_projection,
)
from gameday.gamedays.faultmix import EXPECTATIONS, FaultMix, check_mix, experiment_file
from gameday.safety.stop_conditions import StopOnSpec, stop_on_spec
from gameday.targets import TARGET_KINDS

ON_FAILURE = ("continue", "stop")
GATE_KEYS = ("rto_max_s", "rto_p95_s", "rpo_max_s", "reshard_max_s", "detect_max_s",
             "min_ettr", "min_pass_rate")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


@dataclass(frozen=True)
class PlannedExperiment:
    """One experiment a playbook runs, in order."""

    name: str
    path: Path
    expect: str = "pass"
    variables: Mapping[str, str] = field(default_factory=dict)
    drawn_from: str | None = None  # the fault-mix category, for drawn experiments


@dataclass(frozen=True)
class Schedule:
    cron: str
    timezone: str = "UTC"


@dataclass(frozen=True)
class Gate:
    """Thresholds a gate applies on top of every experiment's own verdict and SLOs."""

    rto_max_s: float | None = None
    rto_p95_s: float | None = None
    rpo_max_s: float | None = None
    reshard_max_s: float | None = None
    detect_max_s: float | None = None
    min_ettr: float | None = None
    min_pass_rate: float | None = None


@dataclass(frozen=True)
class Requirement:
    """A coverage cell an audit requires: at least ``scenarios`` passing scenarios.

    ``real`` counts only evidence injected on a real target (not the virtual lab);
    ``max_age_days`` counts only runs that ended within that many days.
    """

    fault: str
    layer: str
    scenarios: int = 1
    label: str = ""
    real: bool = False
    max_age_days: float | None = None

    @property
    def cell(self) -> tuple[str, str]:
        return self.fault, self.layer

    def describe(self) -> str:
        what = f"{self.label} ({self.fault})" if self.label else self.fault
        terms = (["real target"] if self.real else []) + (
            [f"within {self.max_age_days:g} days"] if self.max_age_days is not None else [])
        return f"{what} at {self.layer} level" + (f" ({', '.join(terms)})" if terms else "")


@dataclass(frozen=True)
class DrawSpec:
    mix: FaultMix
    count: int
    seed: int


@dataclass
class Playbook:
    path: Path
    title: str
    description: str
    experiments: list[PlannedExperiment]
    on_failure: str = "continue"
    target: str | None = None
    draw: DrawSpec | None = None
    schedule: Schedule | None = None
    gate: Gate = Gate()
    fleet: Fleet = field(default_factory=Fleet)
    rpo_s: float = 0.0
    requirements: list[Requirement] = field(default_factory=list)
    variables: dict[str, str] = field(default_factory=dict)
    stop_on: StopOnSpec | None = None  # alerts that stop every run, and the game day

    @property
    def slug(self) -> str:
        return re.sub(r"[^a-z0-9-]+", "-", self.path.stem.lower()).strip("-") or "playbook"

    def plan(self) -> list[PlannedExperiment]:
        """Listed experiments first, then the seeded draw from the fault mix."""
        planned = list(self.experiments)
        if self.draw is not None:
            taken = {p.name for p in planned}
            for position, drawn in enumerate(self.draw.mix.draw(self.draw.count,
                                                                self.draw.seed)):
                name = f"draw{position + 1}-{drawn.experiment.path.stem}"
                while name in taken:
                    name += "-again"
                taken.add(name)
                planned.append(PlannedExperiment(name, drawn.experiment.path,
                                                 drawn.experiment.expect, dict(self.variables),
                                                 drawn_from=drawn.category))
        return planned


def _variables(doc: Document, where: str) -> dict[str, str]:
    values: dict[str, str] = {}
    for key, value in (doc.errors.value(doc.mapping, where) or {}).items():
        if isinstance(value, dict | list) or value is None:
            doc.errors.add(doc.error("must be a string, number or boolean",
                                     join(where, str(key))))
            continue
        values[str(key)] = str(value).lower() if isinstance(value, bool) else str(value)
    return values


def _experiments(doc: Document) -> list[PlannedExperiment]:
    planned: list[PlannedExperiment] = []
    for position, _ in enumerate(doc.errors.value(doc.sequence, "experiments") or []):
        entry = _planned(doc, f"experiments[{position}]", {p.name for p in planned})
        if entry is not None:
            planned.append(entry)
    return planned


def _planned(doc: Document, where: str, taken: set[str]) -> PlannedExperiment | None:
    """One listed experiment; its fields checked independently."""
    found = doc.errors
    if found.value(doc.mapping, where, required=True) is None:
        return None
    doc.only_keys(where, ("path", "name", "expect", "variables"))
    path = found.value(experiment_file, doc, join(where, "path"))
    name = found.value(_run_name, doc, join(where, "name"), path.stem if path else "", taken)
    expect = found.value(doc.choice, join(where, "expect"), EXPECTATIONS, "pass")
    variables = _variables(doc, join(where, "variables"))
    if path is None or name is None or expect is None:
        return None
    return PlannedExperiment(name=name, path=path, expect=expect, variables=variables)


def _run_name(doc: Document, where: str, default: str, taken: set[str]) -> str:
    name = str(doc.text(where, default=default))
    if doc.get(where) is not None and not _NAME.match(name):
        doc.fail(f"must be letters, digits, '.', '_' or '-', got {name!r}", where)
    if name in taken:
        doc.fail(f"name {name!r} is used twice; give each run its own name", where)
    return name


def _draw(doc: Document) -> DrawSpec | None:
    if doc.get("draw") is None:
        return None
    found = doc.errors
    if found.value(doc.mapping, "draw") is None:
        return None
    doc.only_keys("draw", ("mix", "count", "seed"))
    mix = found.value(_mix, doc, "draw.mix")
    count = found.value(doc.number, "draw.count", minimum=1, maximum=1000, integer=True)
    seed = found.value(doc.number, "draw.seed", minimum=0, integer=True)
    for key in ("draw.count", "draw.seed"):
        if doc.get(key) is None:
            found.add(doc.error("is required (the draw must be reproducible)", key))
    if mix is None or count is None or seed is None:
        return None
    return DrawSpec(mix, int(count), int(seed))


def _mix(doc: Document, where: str) -> FaultMix:
    mix_text = str(doc.text(where, required=True))
    mix_path = doc.relative(mix_text)
    if not mix_path.is_file():
        doc.fail(f"no such fault-mix file {mix_text!r}", where)
    mix, errors = check_mix(mix_path)
    if errors:
        more = (f" (and {len(errors) - 1} more: gameday validate {mix_path})"
                if len(errors) > 1 else "")
        doc.fail(f"fault mix does not validate: {errors[0]}{more}", where)
    assert mix is not None
    if not mix.drawable:
        doc.fail("no category of this fault mix has an experiment to draw", where)
    return mix


def _schedule(doc: Document) -> Schedule | None:
    if doc.get("schedule") is None:
        return None
    found = doc.errors
    if found.value(doc.mapping, "schedule") is None:
        return None
    doc.only_keys("schedule", ("cron", "timezone"))
    cron = found.value(_cron, doc, "schedule.cron")
    timezone = found.value(_timezone, doc, "schedule.timezone")
    return None if cron is None or timezone is None else Schedule(cron, timezone)


def _cron(doc: Document, where: str) -> str:
    cron = str(doc.text(where, required=True))
    if len(cron.split()) != 5 or not croniter.is_valid(cron):
        doc.fail(f"not a valid 5-field cron expression: {cron!r}", where)
    return cron


def _timezone(doc: Document, where: str) -> str:
    timezone = str(doc.text(where, default="UTC"))
    try:
        import zoneinfo

        zoneinfo.ZoneInfo(timezone)
    except (ValueError, KeyError, zoneinfo.ZoneInfoNotFoundError):
        doc.fail(f"unknown time zone {timezone!r} (use an IANA name such as UTC or "
                 "Europe/Paris)", where)
    return timezone


def _gate(doc: Document) -> Gate:
    doc.errors.attempt(doc.mapping, "gate")
    doc.only_keys("gate", GATE_KEYS)
    values: dict[str, Any] = {}
    for key in GATE_KEYS:
        bounded = key in ("min_ettr", "min_pass_rate")
        values[key] = doc.errors.value(doc.number, f"gate.{key}", minimum=0,
                                       maximum=1 if bounded else None)
    return Gate(**values)


def _costs(doc: Document, gate: Gate) -> tuple[Fleet, float]:
    """The fleet the playbook says it stands for (``costs``), stated only when it gives
    ``fleet_gpus``; ``gate.min_ettr`` needs a stated training fleet to project onto."""
    found = doc.errors
    found.attempt(doc.mapping, "costs")
    doc.only_keys("costs", ("fleet_gpus", "interruptions_per_gpu_day", "rpo_s", "source",
                            "workload"))
    gpus = found.value(doc.number, "costs.fleet_gpus", minimum=1, integer=True)
    rate = found.value(doc.number, "costs.interruptions_per_gpu_day", minimum=0)
    source = found.value(doc.text, "costs.source", default=None)
    workload = found.value(doc.choice, "costs.workload", WORKLOADS, "training")
    fleet = Fleet(gpus=int(gpus or Fleet().gpus),
                  interruptions_per_gpu_day=LLAMA3_RATE_PER_GPU_DAY if rate is None else rate,
                  source=source or (LLAMA3_SOURCE if rate is None else "playbook costs"),
                  workload="serving" if workload == "serving" else "training",
                  stated=gpus is not None)
    if gate.min_ettr is not None and (reason := no_projection(fleet)):
        why = reason.removeprefix("No projection: ")
        found.add(doc.error(f"needs a training fleet to project onto ({why})",
                            "gate.min_ettr"))
    rpo_s = found.value(doc.number, "costs.rpo_s", minimum=0, default=0.0)
    return fleet, float(rpo_s or 0.0)


def requirements_of(doc: Document) -> list[Requirement]:
    """The ``coverage.require`` list of a playbook or requirement-only file; each entry's
    errors are recorded in ``doc.errors`` and the entry left out."""
    found = doc.errors
    found.attempt(doc.mapping, "coverage")
    doc.only_keys("coverage", ("require",))
    required: list[Requirement] = []
    for position, _ in enumerate(found.value(doc.sequence, "coverage.require") or []):
        requirement = _requirement(doc, f"coverage.require[{position}]")
        if requirement is not None:
            required.append(requirement)
    return required


def _requirement(doc: Document, where: str) -> Requirement | None:
    found = doc.errors
    if found.value(doc.mapping, where, required=True) is None:
        return None
    doc.only_keys(where, ("fault", "layer", "scenarios", "label", "real", "max_age_days"))
    layer = found.value(doc.choice, join(where, "layer"), COVERAGE_LAYERS, "")
    scenarios = found.value(doc.number, join(where, "scenarios"), minimum=1, integer=True,
                            default=1)
    real = doc.get(join(where, "real"))
    if real is not None and not isinstance(real, bool):
        found.add(doc.error(f"must be true or false, got {real!r}", join(where, "real")))
    fault = found.value(doc.text, join(where, "fault"), required=True)
    label = found.value(doc.text, join(where, "label"), default="")
    max_age = found.value(doc.number, join(where, "max_age_days"), minimum=0)
    if layer is None or scenarios is None or fault is None or label is None or (
            doc.get(join(where, "max_age_days")) is not None and max_age is None):
        return None
    return Requirement(fault=fault, layer=layer, scenarios=int(scenarios), label=label,
                       real=bool(real), max_age_days=max_age)


def check_requirements(path: Path) -> tuple[list[Requirement] | None, list[InvalidInput]]:
    """Every error of a playbook's or requirement-only file's coverage requirements, and
    the requirements when it has none."""
    try:
        doc = Document.read(path)
    except InvalidInput as exc:
        return None, [exc]
    required = requirements_of(doc)
    if not required and not doc.errors:
        doc.errors.add(doc.error("lists no required coverage cells", "coverage.require"))
    return (None, doc.errors.by_line()) if doc.errors else (required, [])


def load_requirements(path: Path) -> list[Requirement]:
    """Coverage requirements from a playbook or a requirement-only file; the first of
    :func:`check_requirements`'s errors is raised."""
    return checked(*check_requirements(path))


_PLAYBOOK_KEYS = ("version", "title", "description", "target", "on_failure", "variables",
                  "experiments", "draw", "schedule", "gate", "costs", "coverage", "stop_on")


def check_playbook(path: Path) -> tuple[Playbook | None, list[InvalidInput]]:
    """Every error of a playbook and of what it names (each one line: file, line, key
    path), and the playbook when it has none; nothing is injected."""
    try:
        doc = Document.read(path)
    except InvalidInput as exc:
        return None, [exc]
    found = doc.errors
    doc.only_keys("", _PLAYBOOK_KEYS)
    found.attempt(_version, doc)
    target = found.value(_target, doc)
    shared = _variables(doc, "variables")
    experiments = [PlannedExperiment(p.name, p.path, p.expect, {**shared, **p.variables})
                   for p in _experiments(doc)]
    draw = _draw(doc)
    if not doc.get("experiments") and doc.get("draw") is None:
        found.add(doc.error("a playbook needs experiments, a draw from a fault mix, or both",
                            "experiments"))
    gate = _gate(doc)
    fleet, rpo_s = _costs(doc, gate)
    title = found.value(doc.text, "title", required=True)
    description = found.value(doc.text, "description", default="")
    on_failure = found.value(doc.choice, "on_failure", ON_FAILURE, "continue")
    schedule = _schedule(doc)
    requirements = requirements_of(doc)
    stop_on = found.value(_stop_on, doc)
    if found or title is None or on_failure is None:
        return None, found.by_line()
    return Playbook(
        path=path, title=title, description=description or "", experiments=experiments,
        on_failure=on_failure, target=target, draw=draw, schedule=schedule, gate=gate,
        fleet=fleet, rpo_s=rpo_s, requirements=requirements, variables=shared,
        stop_on=stop_on), []


def load_playbook(path: Path) -> Playbook:
    """Read and validate a playbook and every experiment it names; inject nothing. The
    first of :func:`check_playbook`'s errors is raised."""
    return checked(*check_playbook(path))


def _version(doc: Document) -> None:
    version = doc.number("version", integer=True, default=1)
    if version != 1:
        doc.fail(f"unsupported playbook version {version:g} (this gameday reads version 1)",
                 "version")


def _target(doc: Document) -> str | None:
    target = doc.text("target")
    if target is not None and target not in TARGET_KINDS:
        doc.fail(f"must be one of {', '.join(TARGET_KINDS)}, got {target!r}", "target")
    return target


def _stop_on(doc: Document) -> StopOnSpec | None:
    raw = doc.get("stop_on")
    if raw is None:
        return None
    try:
        return stop_on_spec(raw, "stop_on", environ=os.environ)
    except InvalidInput as exc:
        where = exc.path or "stop_on"
        doc.fail(str(exc).removeprefix(f"{where}: "), where)
