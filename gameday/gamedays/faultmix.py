"""Fault mixes: published failure statistics, mapped to fault kinds and experiments.

A fault-mix file (``playbooks/fault-mix/llama3.yaml``) lists failure categories with
their share of interruptions, the source of the numbers, the fault kind each maps to,
and the experiments that exercise it. A game day draws N experiments from the mix with
a seeded ``random.Random``: a category is picked with probability proportional to its
share (among the categories that have an experiment), then one of its experiments
uniformly. The same seed always gives the same draw.

```yaml
title: Llama 3 405B pre-training, unexpected interruptions
source: {title: "The Llama 3 Herd of Models", publisher: Meta, year: 2024, table: 5}
window: {interruptions: 419, days: 54, gpus: 16384}
categories:
  - name: GPU HBM3 memory
    share: 17.2                # percent of the interruptions
    fault: gpu.ecc             # the fault kind it maps to
    experiments: [../../experiments/gpu-ecc-dbe-reshard.yaml]   # or {path:, expect: fail}
```
"""

import random
import re
from dataclasses import dataclass, field
from pathlib import Path

from gameday.errors import InvalidInput, checked
from gameday.experiment.docfields import Document, join
from gameday.experiment.loader import load_experiment

EXPECTATIONS = ("pass", "fail")
_FAULT_NAME = re.compile(r"^[a-z0-9_]+\.[a-z0-9_.]+$")


@dataclass(frozen=True)
class MixExperiment:
    path: Path
    expect: str = "pass"


@dataclass(frozen=True)
class Category:
    name: str
    share: float
    fault: str
    experiments: tuple[MixExperiment, ...] = ()


@dataclass(frozen=True)
class Draw:
    """One drawn experiment and why it was drawn."""

    category: str
    share: float
    fault: str
    experiment: MixExperiment


@dataclass
class FaultMix:
    path: Path
    title: str
    source: dict[str, object]
    categories: list[Category]
    interruptions: int | None = None
    days: float | None = None
    gpus: int | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def drawable(self) -> list[Category]:
        return [c for c in self.categories if c.experiments]

    def covered_share(self) -> float:
        """The share of interruptions (percent) whose category has an experiment."""
        return sum(c.share for c in self.drawable)

    def uncovered(self) -> list[Category]:
        return [c for c in self.categories if not c.experiments]

    def draw(self, count: int, seed: int) -> list[Draw]:
        """Draw ``count`` experiments, weighted by share; reproducible for a seed."""
        drawable = self.drawable
        if not drawable:
            raise InvalidInput("no category of the mix has an experiment to draw",
                               file=str(self.path))
        rng = random.Random(seed)
        picks = rng.choices(drawable, weights=[c.share for c in drawable], k=count)
        return [Draw(c.name, c.share, c.fault, rng.choice(c.experiments)) for c in picks]


class NamedExperimentInvalid(InvalidInput):
    """An experiment a playbook or fault mix names does not validate; ``gameday
    validate`` reports its errors with its own file instead."""


def experiment_file(doc: Document, where: str) -> Path:
    """The experiment file named by the text at ``where``, relative to the document; it
    must exist and validate."""
    path_text = str(doc.text(where, required=True))
    path = doc.relative(path_text)
    if not path.is_file():
        doc.fail(f"no such experiment file {path_text!r} (paths are relative to "
                 f"{doc.path.parent})", where)
    try:
        load_experiment(path)
    except InvalidInput as exc:
        raise NamedExperimentInvalid(f"experiment does not validate: {exc}",
                                     file=str(doc.path), path=where,
                                     line=doc.line_of(where)) from None
    return path


def _experiment(doc: Document, where: str) -> MixExperiment | None:
    found = doc.errors
    expect: str | None = "pass"
    if isinstance(doc.get(where), str):
        path = found.value(experiment_file, doc, where)
    else:
        if found.value(doc.mapping, where) is None:
            return None
        doc.only_keys(where, ("path", "expect"))
        path = found.value(experiment_file, doc, join(where, "path"))
        expect = found.value(doc.choice, join(where, "expect"), EXPECTATIONS, "pass")
    return None if path is None or expect is None else MixExperiment(path, expect)


def _category(doc: Document, where: str) -> Category | None:
    found = doc.errors
    if found.value(doc.mapping, where, required=True) is None:
        return None
    doc.only_keys(where, ("name", "share", "fault", "experiments", "note"))
    fault = found.value(_fault, doc, join(where, "fault"))
    share = found.value(doc.number, join(where, "share"), minimum=0, maximum=100)
    if share is None and doc.get(join(where, "share")) is None:
        found.add(doc.error("is required", join(where, "share")))
    named = found.value(doc.sequence, join(where, "experiments")) or []
    experiments = [_experiment(doc, f"{where}.experiments[{i}]") for i in range(len(named))]
    name = found.value(doc.text, join(where, "name"), required=True)
    if fault is None or share is None or name is None or None in experiments:
        return None
    return Category(name, share, fault, tuple(e for e in experiments if e is not None))


def _fault(doc: Document, where: str) -> str:
    fault = str(doc.text(where, required=True))
    if not _FAULT_NAME.match(fault):
        doc.fail(f"must be a fault kind such as gpu.ecc, got {fault!r}", where)
    return fault


def check_mix(path: Path) -> tuple[FaultMix | None, list[InvalidInput]]:
    """Every error of a fault-mix file (each one line: file, line, key path), and the
    mix when it has none."""
    try:
        doc = Document.read(path)
    except InvalidInput as exc:
        return None, [exc]
    found = doc.errors
    doc.only_keys("", ("title", "description", "source", "window", "categories", "notes"))
    title = found.value(doc.text, "title", required=True)
    source = found.value(doc.mapping, "source", required=True)
    found.attempt(doc.text, "source.title", required=True)
    found.attempt(doc.mapping, "window")
    doc.only_keys("window", ("interruptions", "days", "gpus"))
    listed = found.value(doc.sequence, "categories", required=True) or []
    categories = [_category(doc, f"categories[{position}]") for position in range(len(listed))]
    total = sum(c.share for c in categories if c is not None)
    if total > 100.05:
        found.add(doc.error(f"shares add up to {total:g}%, more than 100%", "categories"))
    interruptions = found.value(doc.number, "window.interruptions", minimum=1, integer=True)
    gpus = found.value(doc.number, "window.gpus", minimum=1, integer=True)
    days = found.value(doc.number, "window.days", minimum=0.001)
    notes = found.value(doc.sequence, "notes") or []
    if found or title is None or source is None:
        return None, found.by_line()
    return FaultMix(
        path=path, title=title, source=dict(source),
        categories=[c for c in categories if c is not None],
        interruptions=None if interruptions is None else int(interruptions), days=days,
        gpus=None if gpus is None else int(gpus), notes=[str(n) for n in notes]), []


def load_mix(path: Path) -> FaultMix:
    """Read and validate a fault-mix file; the first of :func:`check_mix`'s errors is
    raised."""
    return checked(*check_mix(path))
