"""Prediction consistency: the model gives bit-identical answers to a golden input set.

The probe POSTs a golden input set (deterministic, or read from a file) to a model
endpoint — ``{"inputs": [...]}`` by default, or any JSON shape through a request
template (``verifiers.templates``: ``{"instances": "$inputs"}`` for TF Serving / KServe
v1, ``{"inputs": [{..., "data": "$inputs_flat"}]}`` for KServe v2 / Triton) — picks the
outputs out of the answer with a selector (``outputs``, ``predictions``,
``outputs.0.data``), takes the SHA-256 of a canonical encoding of them (see
``verifiers.canonical``) and compares it with a golden digest: one captured earlier in
the same run, a digest given literally, or a golden file.
"""

import json
import math
import re
from pathlib import Path
from typing import Any

from gameday.activity import current, fail, record
from gameday.atomic import replace_file
from gameday.bounded import read_json
from gameday.errors import GamedayError, one_line
from gameday.httpclient import HttpRequest, send
from verifiers.canonical import OutputsError, as_array, digest, first_difference
from verifiers.inputs import inputs_key, resolve_inputs
from verifiers.templates import DEFAULT_TEMPLATE, render, select

__all__ = ["matches_golden", "save_golden", "verify_predictions"]

_SHA256 = re.compile(r"^[0-9a-fA-F]{64}$")
_SHORT = 12


def _short(hex_digest: str) -> str:
    return hex_digest[:_SHORT] + "…"


class _Golden:
    """What the answer is compared with: a digest, and the outputs when they are known."""

    def __init__(self, source: str, digest_hex: str, outputs: Any = None) -> None:
        self.source = source
        self.digest = digest_hex
        self.outputs = outputs


class _Api:
    """How to talk to the endpoint: request template, output (and shape) selector, dtype."""

    def __init__(self, request: Any = None, outputs: str = "outputs",
                 outputs_shape: str | None = None, dtype: str = "float64") -> None:
        self.template = DEFAULT_TEMPLATE if request is None else request
        self.selector = outputs
        self.shape_selector = outputs_shape
        self.dtype = dtype

    def describe(self) -> dict[str, Any]:
        return {"request": self.template, "outputs": self.selector,
                "outputs_shape": self.shape_selector, "dtype": self.dtype}


def _predict(endpoint: str, inputs: list[list[float]], timeout_s: float,
             api: _Api | None = None) -> Any:
    api = api or _Api()
    body = json.dumps(render(api.template, inputs), separators=(",", ":")).encode("utf-8")
    request = HttpRequest(url=endpoint, method="POST", body=body, timeout_s=timeout_s,
                          headers={"Content-Type": "application/json",
                                   "Accept": "application/json"})
    answer = send(request)
    if not answer.ok:
        raise GamedayError(f"{request.describe()} {answer.error}")
    try:
        document = answer.json()
    except ValueError:
        raise GamedayError(f"{request.describe()} answered {answer.status} with a body that "
                           f"is not JSON") from None
    try:
        outputs = select(document, api.selector)
    except GamedayError as exc:
        raise GamedayError(f"{request.describe()}: {exc}") from None
    if not isinstance(outputs, list):
        raise GamedayError(f"{request.describe()} answered without an {api.selector!r} list")
    try:
        array = as_array(outputs)
        if api.shape_selector:
            shape = select(document, api.shape_selector)
            if not isinstance(shape, list) or array.size != math.prod(
                    int(n) for n in shape):
                raise OutputsError(f"{array.size} values do not fit shape {shape!r} "
                                   f"({api.shape_selector})")
            outputs = array.reshape([int(n) for n in shape]).tolist()
    except (OutputsError, ValueError, TypeError) as exc:
        raise GamedayError(f"{request.describe()} answered malformed outputs: {exc}") from None
    return outputs


def _golden_from_file(path: str, decimals: int | None, dtype: str = "float64") -> _Golden:
    if not Path(path).is_file():
        raise GamedayError(f"golden {path!r} is neither 'capture', a sha256 hex digest nor "
                           f"an existing file")
    _, document = read_json(Path(path), "golden file")
    if not isinstance(document, dict):
        raise GamedayError(f"golden file {path} must hold {{\"digest\", \"outputs\"}}")
    outputs = document.get("outputs")
    if outputs is not None:
        try:
            return _Golden(f"file {path}", digest(outputs, decimals, dtype), outputs)
        except OutputsError as exc:
            raise GamedayError(f"golden file {path}: outputs {exc}") from None
    stored = document.get("digest")
    if not isinstance(stored, str) or not _SHA256.match(stored):
        raise GamedayError(f"golden file {path} has neither outputs nor a sha256 digest")
    if "decimals" in document and document["decimals"] != decimals:
        raise GamedayError(f"golden file {path} digest was taken with decimals="
                           f"{document['decimals']}, this probe uses decimals={decimals}")
    return _Golden(f"file {path}", stored.lower())


def _check(verifier: str, endpoint: str, golden: str, rows: int, cols: int, seed: int,
           decimals: int | None, inputs_file: str | None, timeout_s: float,
           api: _Api) -> dict[str, Any]:
    session = current()
    measurement: dict[str, Any] = {"endpoint": endpoint, "decimals": decimals,
                                   **api.describe()}
    try:
        inputs = resolve_inputs(rows, cols, seed, inputs_file)
        key = f"prediction_hash {endpoint} inputs={inputs_key(inputs)}"
        measurement.update(inputs=inputs_key(inputs), rows=len(inputs), cols=len(inputs[0]))
        expected: _Golden | None = None
        if golden == "capture":
            stored = session.golden.get(key)
            if stored is not None:
                expected = _Golden("captured", digest(stored["outputs"], decimals, api.dtype),
                                   stored["outputs"])
        elif _SHA256.match(golden):
            expected = _Golden("digest", golden.lower())
        else:
            expected = _golden_from_file(golden, decimals, api.dtype)
        outputs = _predict(endpoint, inputs, timeout_s, api)
        actual = digest(outputs, decimals, api.dtype)
    except (GamedayError, OutputsError) as exc:
        fail(verifier, str(exc), measurement)
    measurement.update(digest=actual, shape=list(as_array(outputs).shape))
    if expected is None:
        session.golden[key] = {"digest": digest(outputs), "outputs": outputs,
                               "captured_at": session.clock.now()}
        measurement.update(golden_digest=actual, golden_source="captured", captured=True,
                           matched=True, first_difference=None, max_abs_error=None)
        record(verifier, None, measurement, f"captured golden sha256 {_short(actual)} for "
                                            f"{len(inputs)} rows from {endpoint}")
        return measurement
    measurement.update(golden_digest=expected.digest, golden_source=expected.source,
                       captured=False, matched=actual == expected.digest,
                       first_difference=None, max_abs_error=None)
    if actual == expected.digest:
        record(verifier, True, measurement,
               f"predictions match golden sha256 {_short(actual)} ({len(inputs)} rows)")
        return measurement
    if expected.outputs is None:
        where = "no golden outputs to locate the difference"
    else:
        golden_shape = tuple(as_array(expected.outputs).shape)
        shape = tuple(as_array(outputs).shape)
        difference = first_difference(outputs, expected.outputs, decimals, api.dtype)
        index, error = difference if difference is not None else (None, 0.0)
        measurement.update(first_difference=index, max_abs_error=error)
        if shape != golden_shape:
            where = f"output shape {shape} != golden {golden_shape}"
        else:
            where = f"first difference at output index {index}, max abs error {error:.3g}"
    fail(verifier, f"prediction hash mismatch: sha256 {_short(actual)} != golden "
                   f"{_short(expected.digest)} ({where})", measurement)


def matches_golden(endpoint: str, golden: str = "capture", rows: int = 32, cols: int = 16,
                   seed: int = 0, decimals: int | None = None, inputs_file: str | None = None,
                   timeout_s: float = 10.0, request: Any = None, outputs: str = "outputs",
                   outputs_shape: str | None = None, dtype: str = "float64") -> bool:
    """The model at ``endpoint`` answers the golden inputs exactly as before.

    POSTs ``{"inputs": [...]}`` to ``endpoint``: the file ``inputs_file`` if given
    (``[[...], ...]`` or ``{"inputs": [...]}``), else ``rows`` x ``cols`` deterministic
    golden values from ``seed``. The ``outputs`` are hashed (SHA-256 over dtype, shape and
    float64 bytes; rounded to ``decimals`` places first when given) and compared with
    ``golden``:

    - ``capture`` (default): the first call in a run captures the digest and outputs
      (per endpoint and input set) and passes; later calls compare with them;
    - a sha256 hex digest: compared as is;
    - a path to a JSON file ``{"digest": ..., "outputs": ...}`` (see ``save_golden``):
      with outputs, their digest is the golden one; a digest alone must have been taken
      with the same ``decimals``.

    Any HTTP JSON model endpoint: ``request`` is a request template (default
    ``{"inputs": "$inputs"}``; placeholders ``$inputs``, ``$inputs_flat``, ``$shape``,
    ``$rows``, ``$cols``, see ``verifiers.templates``), ``outputs`` the selector of the
    outputs in the answer (default ``outputs``; e.g. ``predictions``,
    ``outputs.0.data``), ``outputs_shape`` an optional selector of their shape (flat
    KServe v2 ``data`` is reshaped by it). ``dtype`` (``float64``, ``float32``,
    ``float16``) is the precision values are compared and hashed in.

    Returns ``True``; raises ``ActivityFailed``, e.g. ``prediction hash mismatch: sha256
    ab12… != golden cd34… (first difference at output index 17, max abs error 0.83)``, or
    one line naming the endpoint's error.
    """
    _check("prediction_hash.matches_golden", endpoint, golden, rows, cols, seed, decimals,
           inputs_file, timeout_s, _Api(request, outputs, outputs_shape, dtype))
    return True


def verify_predictions(endpoint: str, golden: str = "capture", rows: int = 32, cols: int = 16,
                       seed: int = 0, decimals: int | None = None,
                       inputs_file: str | None = None, timeout_s: float = 10.0,
                       request: Any = None, outputs: str = "outputs",
                       outputs_shape: str | None = None,
                       dtype: str = "float64") -> dict[str, Any]:
    """``matches_golden`` as a method probe: returns the measurement.

    Returns ``{"endpoint", "inputs", "rows", "cols", "decimals", "digest",
    "golden_digest", "golden_source", "captured", "matched", "first_difference",
    "max_abs_error", "shape"}``; raises ``ActivityFailed`` as ``matches_golden`` does.
    """
    return _check("prediction_hash.verify_predictions", endpoint, golden, rows, cols, seed,
                  decimals, inputs_file, timeout_s, _Api(request, outputs, outputs_shape, dtype))


def save_golden(endpoint: str, path: str, rows: int = 32, cols: int = 16, seed: int = 0,
                inputs_file: str | None = None, timeout_s: float = 10.0, request: Any = None,
                outputs: str = "outputs", outputs_shape: str | None = None,
                dtype: str = "float64", overwrite: bool = False) -> dict[str, Any]:
    """Ask ``endpoint`` for the golden outputs now and write them to the JSON file ``path``.

    The file (``{"digest", "outputs", "inputs", ...}``) can then be given as ``golden``
    to ``matches_golden`` in later runs, e.g. a release gate that compares every build
    with a known-good one. Returns ``{"path", "digest", "rows", "cols"}``.

    A golden file is evidence: an existing one is replaced only with ``overwrite: true``
    (else this fails, naming it); and nothing is written once the run has a failed
    verifier or probe or an unmet steady state: then it returns ``{"path", "skipped":
    true, "why"}`` and records the skip (not a failure of its own).
    """
    verifier = "prediction_hash.save_golden"
    measurement: dict[str, Any] = {"endpoint": endpoint, "path": path}
    doubts = current().doubts()
    if doubts:
        why = f"not saved: {doubts[0]}" + (f" (and {len(doubts) - 1} more)"
                                           if len(doubts) > 1 else "")
        skipped = {"path": path, "skipped": True, "why": why}
        record(verifier, None, {**measurement, **skipped}, f"golden {path} {why}")
        return skipped
    target = Path(path)
    if target.exists() and not overwrite:
        fail(verifier, f"golden file {path} exists; pass overwrite: true to replace it",
             measurement)
    try:
        inputs = resolve_inputs(rows, cols, seed, inputs_file)
        answer = _predict(endpoint, inputs, timeout_s, _Api(request, outputs, outputs_shape,
                                                            dtype))
        document = {"digest": digest(answer, None, dtype), "decimals": None, "dtype": dtype,
                    "outputs": answer,
                    "inputs": inputs, "inputs_key": inputs_key(inputs), "endpoint": endpoint,
                    "captured_at": current().clock.now()}
        replace_file(target, (json.dumps(document) + "\n").encode("utf-8"),
                     exclusive=not overwrite)
    except FileExistsError:
        fail(verifier, f"golden file {path} appeared meanwhile; pass overwrite: true to "
             "replace it", measurement)
    except (GamedayError, OutputsError) as exc:
        fail(verifier, str(exc), measurement)
    except OSError as exc:
        fail(verifier, f"cannot write golden file {path}: {one_line(str(exc), 200)}",
             measurement)
    result = {"path": path, "digest": document["digest"], "rows": len(inputs),
              "cols": len(inputs[0])}
    record(verifier, None, {**measurement, **result},
           f"saved golden sha256 {_short(str(document['digest']))} to {path}")
    return result
