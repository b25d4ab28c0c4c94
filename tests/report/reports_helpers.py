"""Journals for report tests: real journals recorded on the lab, varied where a test needs it.

``data/flagship-journal.json`` and ``data/silent-corruption-journal.json`` were written by
``gameday run`` against the embedded lab (the shipped experiments); ``varied`` copies one
and changes only what a test names (verdict, RTO, coverage cell, end time).
"""

import copy
import json
from pathlib import Path
from typing import Any

from gameday.evidence.journal import write_journal

DATA = Path(__file__).resolve().parent / "data"


def real_journal(name: str = "flagship") -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((DATA / f"{name}-journal.json").read_text())
    return loaded


def varied(*, passed: bool = True, rto_s: float | None = 1.2, fault: str = "gpu.ecc",
           layer: str = "device", experiment: str = "experiments/gpu-ecc-dbe-reshard.yaml",
           end: str = "2026-11-29T16:13:36+00:00", reasons: list[str] | None = None,
           reshard_s: float = 1.1, detect_s: float = 0.9) -> dict[str, Any]:
    journal = copy.deepcopy(real_journal("flagship"))
    gd = journal["gameday"]
    gd["experiment_file"] = experiment
    gd["extension"]["coverage"] = {"fault": fault, "layer": layer}
    gd["verdict"] = {"passed": passed, "exit_code": 0 if passed else 1,
                     "status": "completed" if passed else "failed",
                     "reasons": reasons or ([] if passed else ["verifier 'x' failed: boom"])}
    journal["end"] = end
    for result in gd["verifiers"]:
        measurement = result["measurement"]
        if result["verifier"] == "rto.measure_recovery":
            measurement["rto_s"] = rto_s
            if rto_s is not None and rto_s > 20:
                result["passed"] = False
                result["reason"] = f"rto {rto_s:.1f} s > slo 20 s (missed by {rto_s - 20:.1f} s)"
        if result["verifier"] == "reshard.verify_reshard":
            measurement["time_to_reshard_s"] = reshard_s
            measurement["time_to_detect_s"] = detect_s
    return journal


def write(path: Path, journal: dict[str, Any]) -> Path:
    """Write ``journal`` as ``gameday run`` does: hash-chained into its directory."""
    write_journal(path, journal)
    return path
