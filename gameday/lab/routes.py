"""The router's view of where each shard is served (shard -> URL), versioned.

The controller owns placement; it pushes routes to the router and the router also
polls the controller's ``/placement``. A route set carries ``(epoch, version)``: the
controller's start time and its placement version, so a late poll never undoes a newer
push and a restarted controller (new epoch) is followed at once.
"""

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gameday.contract.gpus import gpu_label

__all__ = ["Route", "RouteTable", "routes_from_json"]


@dataclass(frozen=True)
class Route:
    shard: int
    node: str
    gpu: int
    url: str

    @property
    def where(self) -> str:
        """``shard 0 (node-0/gpu0)``."""
        return f"shard {self.shard} ({gpu_label(self.node, self.gpu)})"

    def to_json(self) -> dict[str, Any]:
        return {"shard": self.shard, "node": self.node, "gpu": self.gpu, "url": self.url}


def routes_from_json(items: Iterable[Mapping[str, Any]]) -> list[Route]:
    """Routes from placement or push entries; entries without a URL are skipped."""
    routes = []
    for item in items:
        url = item.get("url")
        if isinstance(url, str) and url:
            routes.append(Route(int(item["shard"]), str(item["node"]), int(item["gpu"]), url))
    return routes


class RouteTable:
    """Thread-safe current routes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stamp: tuple[float, int] = (0.0, -1)
        self._routes: dict[int, Route] = {}

    def update(self, epoch: float, version: int, routes: Iterable[Route]) -> bool:
        """Take ``routes`` if ``(epoch, version)`` is newer than what we have."""
        with self._lock:
            if (epoch, version) <= self._stamp:
                return False
            self._stamp = (epoch, version)
            self._routes = {r.shard: r for r in routes}
            return True

    def snapshot(self) -> tuple[tuple[float, int], dict[int, Route]]:
        with self._lock:
            return self._stamp, dict(self._routes)
