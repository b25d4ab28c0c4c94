"""A placement source by its spec: the one place that knows every kind of source (the run
target's, an HTTP JSON endpoint, Kubernetes)."""

from collections.abc import Mapping
from typing import Any

from verifiers.placement import (
    HttpPlacementSource,
    LabPlacementSource,
    PlacementError,
    PlacementSource,
)

__all__ = ["placement_source"]


def placement_source(spec: str | Mapping[str, Any], timeout_s: float = 5.0) -> PlacementSource:
    """``lab`` / ``target``: the run target's placement; an http(s) URL: that endpoint;
    ``{"kubernetes": {...}}``: shard pods joined with dcgm-exporter series
    (:mod:`verifiers.k8s_placement`)."""
    if isinstance(spec, Mapping):
        if set(spec) != {"kubernetes"} or not isinstance(spec["kubernetes"], Mapping):
            raise PlacementError('a placement mapping must be {"kubernetes": {...}}')
        from verifiers.k8s_placement import kubernetes_source

        return kubernetes_source(spec["kubernetes"])
    if spec in ("lab", "target"):
        source = LabPlacementSource(timeout_s)
        source.url()  # fail now, not after a timeout, when there is no URL
        return source
    if spec.startswith(("http://", "https://")):
        return HttpPlacementSource(spec, timeout_s)
    raise PlacementError(f"placement source must be 'lab', 'target' or an http(s) URL, "
                         f"got {spec!r}")
