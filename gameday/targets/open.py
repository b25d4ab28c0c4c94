"""The target of a run by its kind: the one place that knows every kind of target."""

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gameday.errors import InvalidInput
from gameday.targets import TARGET_KINDS
from gameday.targets.base import Target, host_target, lab_target

__all__ = ["open_target"]


def open_target(kind: str, configuration: Mapping[str, Any], *, lab_dir: Path) -> Target | None:
    """The target of a run, by kind; ``none`` gives no target (plain toolkit semantics)."""
    if kind == "none":
        return None
    if kind == "lab":
        return lab_target(lab_dir)
    if kind == "host":
        return host_target(configuration)
    if kind == "kubernetes":
        from gameday.targets.kubernetes.target import (
            kubernetes_target,  # loads the client only when asked
        )

        return kubernetes_target(configuration)
    raise InvalidInput(f"unknown target {kind!r} (known: {', '.join(TARGET_KINDS)})",
                       path="--target")
