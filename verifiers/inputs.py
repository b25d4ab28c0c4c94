"""Deterministic golden input sets for model endpoints.

``golden_inputs(rows, cols, seed)`` is the same on every machine, Python and numpy
version: values come from a SplitMix64 stream and are multiples of 1/1024 in
``[-1, 1)``, so they survive JSON and ``float32`` unchanged. An input set can also be
read from a JSON file (``[[...], ...]`` or ``{"inputs": [[...], ...]}``).
"""

from pathlib import Path
from typing import Any

from gameday.bounded import read_json
from gameday.errors import InvalidInput
from verifiers.canonical import OutputsError, as_array, digest

__all__ = ["golden_inputs", "inputs_key", "load_inputs", "resolve_inputs"]

_MASK = (1 << 64) - 1
_STEP = 1024


def _splitmix64(state: int) -> tuple[int, int]:
    state = (state + 0x9E3779B97F4A7C15) & _MASK
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return state, z ^ (z >> 31)


def golden_inputs(rows: int = 32, cols: int = 16, seed: int = 0) -> list[list[float]]:
    """``rows`` x ``cols`` deterministic values in ``[-1, 1)``, multiples of 1/1024."""
    if rows < 1 or cols < 1:
        raise InvalidInput(f"golden inputs need rows >= 1 and cols >= 1, got {rows} x {cols}")
    state = seed & _MASK
    table: list[list[float]] = []
    for _ in range(rows):
        row: list[float] = []
        for _ in range(cols):
            state, value = _splitmix64(state)
            row.append(((value >> 53) - _STEP) / _STEP)  # 11 high bits -> [-1024, 1024)
        table.append(row)
    return table


def load_inputs(path: str | Path) -> list[list[float]]:
    """Read an input set from a JSON file: a list of rows, or ``{"inputs": rows}``."""
    file = str(path)
    document: Any = read_json(Path(path), "JSON inputs file")[1]
    if isinstance(document, dict):
        document = document.get("inputs")
    if not isinstance(document, list) or not document:
        raise InvalidInput("expected a non-empty list of rows or {\"inputs\": [...]}", file=file)
    try:
        array = as_array(document)
    except OutputsError as exc:
        raise InvalidInput(f"inputs {exc}", file=file) from None
    if array.ndim != 2:
        raise InvalidInput(f"inputs must be a list of rows (2-D), got shape {array.shape}",
                           file=file)
    table: list[list[float]] = array.tolist()
    return table


def resolve_inputs(rows: int, cols: int, seed: int,
                   inputs_file: str | None = None) -> list[list[float]]:
    """The input set a verifier sends: from ``inputs_file`` if given, else generated."""
    if inputs_file:
        return load_inputs(inputs_file)
    return golden_inputs(rows, cols, seed)


def inputs_key(inputs: list[list[float]]) -> str:
    """A short, stable name for an input set (the first 16 hex digits of its digest)."""
    return digest(inputs)[:16]
