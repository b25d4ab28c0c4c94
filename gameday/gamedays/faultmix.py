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

from gameday.errors import InvalidInput
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


def _experiment(doc: Document, where: str) -> MixExperiment:
    raw = doc.get(where)
    if isinstance(raw, str):
        path_text, expect = raw, "pass"
    else:
        doc.mapping(where)
        doc.only_keys(where, ("path", "expect"))
        path_text = str(doc.text(join(where, "path"), required=True))
        expect = doc.choice(join(where, "expect"), EXPECTATIONS, "pass")
    path = doc.relative(path_text)
    if not path.is_file():
        doc.fail(f"no such experiment file {path_text!r} (relative to {doc.path.parent})",
                 where)
    try:
        load_experiment(path)
    except InvalidInput as exc:
        doc.fail(f"experiment does not validate: {exc}", where)
    return MixExperiment(path, expect)


def load_mix(path: Path) -> FaultMix:
    """Read and validate a fault-mix file; errors name file, key path and line."""
    doc = Document.read(path)
    doc.only_keys("", ("title", "description", "source", "window", "categories", "notes"))
    title = str(doc.text("title", required=True))
    source = doc.mapping("source", required=True)
    doc.text("source.title", required=True)
    doc.mapping("window")
    doc.only_keys("window", ("interruptions", "days", "gpus"))
    categories: list[Category] = []
    for position, _ in enumerate(doc.sequence("categories", required=True)):
        where = f"categories[{position}]"
        doc.mapping(where, required=True)
        doc.only_keys(where, ("name", "share", "fault", "experiments", "note"))
        fault = str(doc.text(join(where, "fault"), required=True))
        if not _FAULT_NAME.match(fault):
            doc.fail(f"must be a fault kind such as gpu.ecc, got {fault!r}", join(where, "fault"))
        share = doc.number(join(where, "share"), minimum=0, maximum=100)
        if share is None:
            doc.fail("is required", join(where, "share"))
        experiments = tuple(
            _experiment(doc, f"{where}.experiments[{i}]")
            for i, _ in enumerate(doc.sequence(join(where, "experiments"))))
        categories.append(Category(str(doc.text(join(where, "name"), required=True)),
                                   share, fault, experiments))
    total = sum(c.share for c in categories)
    if total > 100.05:
        doc.fail(f"shares add up to {total:g}%, more than 100%", "categories")
    interruptions = doc.number("window.interruptions", minimum=1, integer=True)
    gpus = doc.number("window.gpus", minimum=1, integer=True)
    return FaultMix(
        path=path, title=title, source=dict(source), categories=categories,
        interruptions=None if interruptions is None else int(interruptions),
        days=doc.number("window.days", minimum=0.001),
        gpus=None if gpus is None else int(gpus),
        notes=[str(n) for n in doc.sequence("notes")])
