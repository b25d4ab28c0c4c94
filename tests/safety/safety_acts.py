"""Activities for the safety tests: slow phases that announce themselves with a marker
file, so a test can deliver a real signal while a given phase runs."""

import time
from pathlib import Path
from typing import Any

from faults.gpu import ecc_error

__all__ = ["echo", "hold", "inject_then_hold"]


def hold(marker: str, seconds: float = 30.0) -> bool:
    """Write ``marker`` then sleep (a steady-state probe, verifier or rollback that runs)."""
    Path(marker).write_text("started")
    time.sleep(seconds)
    return True


def inject_then_hold(gpu: dict[str, Any], marker: str, seconds: float = 30.0) -> dict[str, Any]:
    """Inject a single-bit ECC error, then stay inside the action (the injection phase)."""
    applied = ecc_error(gpu=gpu, kind="single_bit", count=1)
    hold(marker, seconds)
    return applied


def echo(text: str) -> str:
    """Return ``text`` (lets a test plant a secret in an activity's output)."""
    return text
