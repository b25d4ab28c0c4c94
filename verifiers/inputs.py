"""Deterministic golden input sets for model endpoints.

``golden_inputs(rows, cols, seed)`` is the same on every machine, Python and numpy
version: values come from a SplitMix64 stream and are multiples of 1/1024 in
``[-1, 1)``, so they survive JSON and ``float32`` unchanged. An input set can also be
read from a JSON file (``[[...], ...]`` or ``{"inputs": [[...], ...]}``).
:func:`build_request` is the request a probe sends, with a golden input set POSTed to a
``/predict`` URL.
"""

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from gameday.bounded import read_json
from gameday.errors import InvalidInput
from gameday.httpclient import HttpRequest
from verifiers.canonical import OutputsError, as_array, digest

__all__ = ["build_request", "golden_inputs", "inputs_key", "is_predict_url", "load_inputs",
           "resolve_inputs"]

_MASK = (1 << 64) - 1
_STEP = 1024
_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


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


def is_predict_url(url: str) -> bool:
    return urlsplit(url).path.rstrip("/").endswith("/predict")


def build_request(url: str, *, method: str | None = None, json_body: Any = None,
                  predict_rows: int = 1, predict_cols: int = 16, seed: int = 0,
                  timeout_s: float = 5.0, headers: Mapping[str, str] | None = None,
                  where: str = "url") -> HttpRequest:
    """The request a probe sends to ``url``.

    A ``json_body`` is POSTed as JSON. Without one, a URL whose path ends in ``/predict``
    gets ``{"inputs": golden_inputs(predict_rows, predict_cols, seed)}`` POSTed; any other
    URL is fetched with GET. ``method`` overrides the method in every case.
    """
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise InvalidInput(f"must be an http(s) URL, got {url!r}", path=where)
    if timeout_s <= 0:
        raise InvalidInput(f"request timeout must be > 0 s, got {timeout_s}", path=where)
    all_headers = {"Accept": "application/json", **dict(headers or {})}
    body: bytes | None = None
    if json_body is not None:
        payload: Any = json_body
    elif is_predict_url(url) and (method is None or method.upper() != "GET"):
        payload = {"inputs": golden_inputs(predict_rows, predict_cols, seed)}
    else:
        payload = None
    if payload is not None:
        body = json.dumps(payload, separators=(",", ":")).encode("utf-8")
        all_headers.setdefault("Content-Type", "application/json")
    verb = (method or ("POST" if body is not None else "GET")).upper()
    if verb not in _METHODS:
        raise InvalidInput(f"unknown HTTP method {method!r}", path=where)
    return HttpRequest(url=url, method=verb, body=body, headers=all_headers,
                       timeout_s=timeout_s)
