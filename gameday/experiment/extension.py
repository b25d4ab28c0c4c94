"""The ``gameday`` experiment extension (docs/running.md), parsed into typed values."""

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gameday.errors import InvalidInput
from gameday.experiment import keys
from gameday.experiment.silence import SilenceSpec, silence_spec
from gameday.experiment.stop_on import StopOnSpec, stop_on_spec
from gameday.targets import TARGET_KINDS

#: The targets an experiment may name (every kind but ``none``).
_EXPERIMENT_TARGETS = tuple(kind for kind in TARGET_KINDS if kind != "none")

COVERAGE_LAYERS = ("device", "node", "container", "service", "network", "storage")
DEFAULT_LEASE_S = 30.0


@dataclass(frozen=True)
class BlastRadius:
    max_gpus: int | None = None
    max_nodes: int | None = None
    max_percent: float | None = None  # of the fleet's GPUs


@dataclass(frozen=True)
class Slo:
    rto_s: float | None = None
    rpo_steps: int | None = None


@dataclass(frozen=True)
class SafeguardSpec:
    """An abort condition: a PromQL query or an HTTP GET, and the bounds it must stay in.

    ``promql`` measures the query's first value; ``http`` measures the answer's status
    code, or with ``json`` a number at that dotted key path in the answer. The run is
    interrupted when the measurement leaves ``min``..``max`` or differs from ``equals``,
    or when ``failures`` checks in a row cannot measure at all.
    """

    name: str
    promql: str | None = None
    http: str | None = None
    json: str | None = None
    max: float | None = None
    min: float | None = None
    equals: float | None = None
    interval_s: float = 1.0
    failures: int = 3


@dataclass(frozen=True)
class Extension:
    target: str | None = None
    coverage: Mapping[str, str] = field(default_factory=dict)
    blast_radius: BlastRadius = BlastRadius()
    slo: Slo = Slo()
    lease_s: float = DEFAULT_LEASE_S
    safeguards: tuple[SafeguardSpec, ...] = ()
    silence: SilenceSpec | None = None  # an Alertmanager silence held during the run
    stop_on: StopOnSpec | None = None  # Alertmanager alerts that stop the run
    present: bool = False




def _number(value: Any, path: str, *, minimum: float, integer: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or (
            integer and not isinstance(value, int)):
        raise InvalidInput(f"must be {'an integer' if integer else 'a number'}, got {value!r}",
                           path=path)
    if not math.isfinite(value):
        raise InvalidInput(f"must be a finite number, got {value!r}", path=path)
    if value < minimum:
        raise InvalidInput(f"must be >= {minimum}, got {value!r}", path=path)
    return float(value)


def _mapping(value: Any, path: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise InvalidInput(f"must be a mapping, got {type(value).__name__}", path=path)
    return value


def parse_extension(experiment: Mapping[str, Any]) -> Extension:
    """Find and validate the ``gameday`` extension; an absent one gives the defaults.

    Errors carry the key path (``extensions[0].slo.rto_s``); the loader adds file and line.
    """
    extensions = experiment.get("extensions") or []
    if not isinstance(extensions, list):
        raise InvalidInput("must be a list", path="extensions")
    for position, raw in enumerate(extensions):
        if not isinstance(raw, Mapping) or not isinstance(raw.get("name"), str):
            raise InvalidInput("must be a mapping with a name", path=f"extensions[{position}]")
        if raw.get("name") == "gameday":
            return _parse_one(raw, f"extensions[{position}]")
    return Extension()


def _parse_one(raw: Mapping[str, Any], base: str) -> Extension:
    unknown = sorted(set(raw) - set(keys.GAMEDAY))
    if unknown:
        raise keys.unknown_key(unknown[0], keys.GAMEDAY, f"{base}.{unknown[0]}")
    target = raw.get("target")
    if target is not None and target not in _EXPERIMENT_TARGETS:
        raise InvalidInput(f"must be one of {', '.join(_EXPERIMENT_TARGETS)}, got {target!r}",
                           path=f"{base}.target")
    coverage = _mapping(raw.get("coverage", {}), f"{base}.coverage")
    layer = coverage.get("layer")
    if layer is not None and layer not in COVERAGE_LAYERS:
        raise InvalidInput(f"must be one of {', '.join(COVERAGE_LAYERS)}, got {layer!r}",
                           path=f"{base}.coverage.layer")
    blast = _mapping(raw.get("blast_radius", {}), f"{base}.blast_radius")
    for key in blast:
        if key not in keys.BLAST_RADIUS:
            raise keys.unknown_key(key, keys.BLAST_RADIUS, f"{base}.blast_radius.{key}")
    percent = blast.get("max_percent")
    if percent is not None and _number(percent, f"{base}.blast_radius.max_percent",
                                       minimum=0) > 100:
        raise InvalidInput(f"must be <= 100, got {percent!r}",
                           path=f"{base}.blast_radius.max_percent")
    slo = _mapping(raw.get("slo", {}), f"{base}.slo")
    for key in slo:
        if key not in keys.SLO:
            raise keys.unknown_key(key, keys.SLO, f"{base}.slo.{key}")

    def optional_int(mapping: Mapping[str, Any], key: str, path: str) -> int | None:
        if mapping.get(key) is None:
            return None
        return int(_number(mapping[key], f"{path}.{key}", minimum=1, integer=True))

    rto = slo.get("rto_s")
    return Extension(
        target=target,
        coverage={str(k): str(v) for k, v in coverage.items()},
        blast_radius=BlastRadius(
            max_gpus=optional_int(blast, "max_gpus", f"{base}.blast_radius"),
            max_nodes=optional_int(blast, "max_nodes", f"{base}.blast_radius"),
            max_percent=None if percent is None else float(percent)),
        slo=Slo(rto_s=None if rto is None else _number(rto, f"{base}.slo.rto_s", minimum=0),
                rpo_steps=optional_int(slo, "rpo_steps", f"{base}.slo")),
        lease_s=_number(raw.get("lease_s", DEFAULT_LEASE_S), f"{base}.lease_s", minimum=1),
        safeguards=_safeguards(raw.get("safeguards", []), f"{base}.safeguards"),
        silence=None if raw.get("silence") is None else silence_spec(
            raw["silence"], f"{base}.silence", environ=os.environ),
        stop_on=None if raw.get("stop_on") is None else stop_on_spec(
            raw["stop_on"], f"{base}.stop_on", environ=os.environ),
        present=True,
    )


MAX_SAFEGUARDS = 64


def _safeguards(raw: Any, base: str) -> tuple[SafeguardSpec, ...]:
    if not isinstance(raw, list):
        raise InvalidInput("must be a list of safeguards", path=base)
    if len(raw) > MAX_SAFEGUARDS:
        raise InvalidInput(f"more than {MAX_SAFEGUARDS} safeguards", path=base)
    specs: list[SafeguardSpec] = []
    for position, item in enumerate(raw):
        where = f"{base}[{position}]"
        entry = _mapping(item, where)
        for key in entry:
            if key not in keys.SAFEGUARD:
                raise keys.unknown_key(key, keys.SAFEGUARD, f"{where}.{key}")
        name = entry.get("name")
        if not isinstance(name, str) or not name:
            raise InvalidInput("is required (a non-empty string)", path=f"{where}.name")
        sources = [key for key in ("promql", "http") if entry.get(key) is not None]
        if len(sources) != 1:
            raise InvalidInput("needs exactly one of promql, http", path=where)
        for key in (*sources, "json"):
            if entry.get(key) is not None and (not isinstance(entry[key], str)
                                               or not entry[key]):
                raise InvalidInput("must be a non-empty string", path=f"{where}.{key}")
        bounds = {key: _number(entry[key], f"{where}.{key}", minimum=float("-inf"))
                  for key in ("max", "min", "equals") if entry.get(key) is not None}
        if not bounds:
            raise InvalidInput("needs a tolerance: max, min or equals", path=where)
        specs.append(SafeguardSpec(
            name=name, promql=entry.get("promql"), http=entry.get("http"),
            json=entry.get("json"), max=bounds.get("max"), min=bounds.get("min"),
            equals=bounds.get("equals"),
            interval_s=_number(entry.get("interval_s", 1.0), f"{where}.interval_s",
                               minimum=0.05),
            failures=int(_number(entry.get("failures", 3), f"{where}.failures", minimum=1,
                                 integer=True))))
    return tuple(specs)
