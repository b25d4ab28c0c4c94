"""A small typed PromQL client for verifiers: instant and range queries, one-line errors."""

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import requests

from gameday.engine.session import current
from gameday.errors import GamedayError
from verifiers._results import one_line

__all__ = ["PromQL", "PromQLError", "Series", "prometheus_url_of", "series_key"]


class PromQLError(GamedayError):
    """A query failed: Prometheus unreachable, the query rejected, or a surprising answer."""


Labels = Mapping[str, str]


def series_key(labels: Labels) -> str:
    """``name{a="1",b="2"}`` for a label set (labels sorted; ``{}`` when none)."""
    name = labels.get("__name__", "")
    inner = ",".join(f'{key}="{value}"' for key, value in sorted(labels.items())
                     if key != "__name__")
    return f"{name}{{{inner}}}"


@dataclass(frozen=True)
class Series:
    """One series of a query result: its labels and ``(t, value)`` samples in time order."""

    labels: Labels
    samples: tuple[tuple[float, float], ...]

    @property
    def key(self) -> str:
        return series_key(self.labels)


def prometheus_url_of(explicit: str | None) -> str:
    """``explicit``, else the run target's Prometheus; ``PromQLError`` when there is none."""
    target = current().target
    url = explicit or (target.prometheus_url if target is not None else None)
    if not url:
        raise PromQLError("needs prometheus_url: pass it, or run with a target that has "
                          "Prometheus (e.g. --target lab)")
    return url.rstrip("/")


class PromQL:
    """Queries one Prometheus server over its HTTP API."""

    def __init__(self, url: str, timeout_s: float = 5.0) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s

    def _get(self, path: str, params: dict[str, str], query: str) -> Any:
        label = f"query {one_line(query, 120)!r}"
        try:
            response = requests.get(self.url + path, params=params, timeout=self.timeout_s)
        except requests.RequestException as exc:
            raise PromQLError(f"{label}: cannot reach Prometheus at {self.url}: "
                              f"{type(exc).__name__}") from None
        try:
            body = response.json()
        except ValueError:
            body = None
        if not isinstance(body, dict) or body.get("status") != "success":
            error = body.get("error") if isinstance(body, dict) else None
            raise PromQLError(f"{label} failed at {self.url}: HTTP {response.status_code}"
                              + (f": {one_line(str(error), 200)}" if error else ""))
        return body.get("data") or {}

    def instant(self, query: str, at: float | None = None) -> list[tuple[Labels, float]]:
        """The instant vector (or scalar) of ``query`` now, or at Unix time ``at``."""
        params = {"query": query}
        if at is not None:
            params["time"] = f"{at:.3f}"
        data = self._get("/api/v1/query", params, query)
        kind, result = data.get("resultType"), data.get("result")
        if kind == "scalar" and isinstance(result, list):
            return [({}, float(result[1]))]
        if kind != "vector" or not isinstance(result, list):
            raise PromQLError(f"query {one_line(query, 120)!r} returned a {kind}; "
                              f"an instant vector or scalar is needed")
        return [(dict(item.get("metric") or {}), float(item["value"][1])) for item in result]

    def range(self, query: str, start: float, end: float, step_s: float) -> list[Series]:
        """``query`` evaluated every ``step_s`` from ``start`` to ``end`` (Unix seconds)."""
        step = max(step_s, (end - start) / 10_000, 0.001)
        data = self._get("/api/v1/query_range",
                         {"query": query, "start": f"{start:.3f}", "end": f"{end:.3f}",
                          "step": f"{step:.3f}"}, query)
        result = data.get("result")
        if data.get("resultType") != "matrix" or not isinstance(result, list):
            raise PromQLError(f"query {one_line(query, 120)!r}: unexpected range result")
        found = []
        for item in result:
            samples = tuple((float(t), float(v)) for t, v in item.get("values") or []
                            if not math.isnan(float(v)))
            found.append(Series(dict(item.get("metric") or {}), samples))
        return found
