"""Typed placement (which shard runs on which GPU) and the sources that read it.

A :class:`PlacementSource` returns a :class:`Placement`: shards, GPUs and the
controller's event log. The HTTP JSON form (the lab's ``/placement`` endpoint, or any
service that serves the same document) is::

    {"time": t, "version": n,
     "shards": [{"shard", "node", "gpu", "uuid", "url", "pid",
                 "status": "serving" | "starting" | "failed"}],
     "gpus": [{"node", "gpu", "uuid", "nvlink_domain", "state": "healthy" | "cordoned",
               "shards": [...]}],
     "events": [{"t", "type", "node", "gpu", "shard"?, "to": {"node", "gpu"}?, "alert"?}]}

with ``type`` one of ``alert_firing``, ``gpu_cordoned``, ``shard_moved``,
``shard_restarted``, ``gpu_uncordoned``, ``alert_resolved``; times are Unix seconds.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from gameday.activity import current
from gameday.contract.gpus import gpu_label
from gameday.errors import GamedayError
from gameday.httpclient import get_json

__all__ = ["GpuState", "HttpPlacementSource", "LabPlacementSource", "Placement",
           "PlacementError", "PlacementEvent", "PlacementSource", "ShardPlacement",
           "gpu_label", "parse_placement"]


class PlacementError(GamedayError):
    """A placement source could not be read, or answered something malformed."""


@dataclass(frozen=True)
class ShardPlacement:
    """One shard; ``node``/``gpu`` are None while it has no process on any GPU."""

    shard: int
    node: str | None
    gpu: int | None
    status: str
    uuid: str = ""
    url: str = ""
    pid: int | None = None

    @property
    def where(self) -> tuple[str, int] | None:
        if self.node is None or self.gpu is None:
            return None
        return (self.node, self.gpu)

    @property
    def label(self) -> str:
        return gpu_label(*self.where) if self.where else "no GPU"


@dataclass(frozen=True)
class GpuState:
    node: str
    gpu: int
    nvlink_domain: str
    state: str
    uuid: str = ""

    @property
    def key(self) -> tuple[str, int]:
        return (self.node, self.gpu)

    @property
    def label(self) -> str:
        return gpu_label(self.node, self.gpu)


@dataclass(frozen=True)
class PlacementEvent:
    t: float
    type: str
    node: str
    gpu: int | None
    shard: int | None = None
    to: tuple[str, int] | None = None
    alert: str | None = None


@dataclass(frozen=True)
class Placement:
    """One snapshot of the placement."""

    time: float
    version: int
    shards: tuple[ShardPlacement, ...]
    gpus: tuple[GpuState, ...]
    events: tuple[PlacementEvent, ...] = ()

    def gpu(self, node: str, index: int) -> GpuState | None:
        for gpu in self.gpus:
            if gpu.key == (node, index):
                return gpu
        return None

    def shards_on(self, node: str, index: int) -> list[ShardPlacement]:
        return [shard for shard in self.shards if shard.where == (node, index)]

    def shard(self, number: int) -> ShardPlacement | None:
        for shard in self.shards:
            if shard.shard == number:
                return shard
        return None


class PlacementSource(Protocol):
    """Anything that can read the current placement."""

    def describe(self) -> str: ...

    def read(self) -> Placement: ...


def _field(raw: Mapping[str, Any], key: str, kind: type, where: str) -> Any:
    value = raw.get(key)
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise PlacementError(f"{where}.{key} must be {kind.__name__}, got {value!r}")
    return value


def parse_placement(data: Any) -> Placement:
    """The JSON placement document as a :class:`Placement`; one-line errors naming the key."""
    if not isinstance(data, Mapping):
        raise PlacementError("placement is not a JSON object")
    if not isinstance(data.get("shards"), list):
        found = ("no key shards, keys: " + (", ".join(sorted(map(str, data))[:8]) or "none")
                 if "shards" not in data else
                 f"shards is a JSON {type(data['shards']).__name__}")
        raise PlacementError(f"placement has {found}: not a placement document (shards, "
                             f"gpus, events); for another controller's API use "
                             f"verifiers.replacement with a units mapping")
    for key in ("gpus", "events"):
        if key in data and not isinstance(data[key], list | type(None)):
            raise PlacementError(f"placement.{key} must be a list, got a JSON "
                                 f"{type(data[key]).__name__}")
    shards = []
    for position, raw in enumerate(data["shards"]):
        where = f"shards[{position}]"
        if not isinstance(raw, Mapping):
            raise PlacementError(f"{where} is not an object")
        pid = raw.get("pid")
        placed = raw.get("node") is not None or raw.get("gpu") is not None
        shards.append(ShardPlacement(
            shard=_field(raw, "shard", int, where),
            node=_field(raw, "node", str, where) if placed else None,
            gpu=_field(raw, "gpu", int, where) if placed else None,
            status=_field(raw, "status", str, where),
            uuid=str(raw.get("uuid") or ""), url=str(raw.get("url") or ""),
            pid=pid if isinstance(pid, int) else None))
    gpus = []
    for position, raw in enumerate(data.get("gpus") or []):
        where = f"gpus[{position}]"
        if not isinstance(raw, Mapping):
            raise PlacementError(f"{where} is not an object")
        node = _field(raw, "node", str, where)
        gpus.append(GpuState(
            node=node, gpu=_field(raw, "gpu", int, where),
            nvlink_domain=str(raw.get("nvlink_domain") or node),
            state=str(raw.get("state") or "healthy"), uuid=str(raw.get("uuid") or "")))
    events = []
    for position, raw in enumerate(data.get("events") or []):
        where = f"events[{position}]"
        if not isinstance(raw, Mapping):
            raise PlacementError(f"{where} is not an object")
        to = raw.get("to")
        destination = None
        if isinstance(to, Mapping):
            destination = (_field(to, "node", str, f"{where}.to"),
                           _field(to, "gpu", int, f"{where}.to"))
        gpu = raw.get("gpu")
        shard = raw.get("shard")
        events.append(PlacementEvent(
            t=_field(raw, "t", float, where), type=_field(raw, "type", str, where),
            node=str(raw.get("node") or ""),
            gpu=gpu if isinstance(gpu, int) and not isinstance(gpu, bool) else None,
            shard=shard if isinstance(shard, int) and not isinstance(shard, bool) else None,
            to=destination, alert=str(raw["alert"]) if raw.get("alert") else None))
    time = data.get("time", 0.0)
    version = data.get("version", 0)
    return Placement(time=float(time) if isinstance(time, int | float) else 0.0,
                     version=int(version) if isinstance(version, int) else 0,
                     shards=tuple(shards), gpus=tuple(gpus),
                     events=tuple(sorted(events, key=lambda event: event.t)))


class HttpPlacementSource:
    """Reads the placement JSON document from ``url``."""

    def __init__(self, url: str, timeout_s: float = 5.0) -> None:
        self.url = url
        self.timeout_s = timeout_s

    def describe(self) -> str:
        return self.url

    def read(self) -> Placement:
        try:
            data = get_json(self.url, timeout_s=self.timeout_s)
        except GamedayError as exc:
            raise PlacementError(str(exc)) from None
        try:
            return parse_placement(data)
        except PlacementError as exc:
            raise PlacementError(f"placement at {self.url}: {exc}") from None


class LabPlacementSource:
    """Reads the placement from the run target's ``placement_url`` (the lab's API, or
    any target that serves the same document)."""

    def __init__(self, timeout_s: float = 5.0) -> None:
        self.timeout_s = timeout_s

    def url(self) -> str:
        """The target's placement URL; ``PlacementError`` when the target has none."""
        target = current().target
        if target is None or not target.placement_url:
            raise PlacementError("the run target has no placement_url: run with --target lab "
                                 "or pass a placement URL")
        return target.placement_url

    def describe(self) -> str:
        try:
            return self.url()
        except PlacementError:
            return "target placement (none)"

    def read(self) -> Placement:
        return HttpPlacementSource(self.url(), self.timeout_s).read()
