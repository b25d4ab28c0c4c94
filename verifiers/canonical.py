"""A canonical encoding of model outputs, so that equal answers hash equal.

The digest covers a small header (encoding version, dtype, shape, rounding) and the
values as C-ordered little-endian float64 bytes. Two output sets have the same digest
exactly when they have the same shape and bit-identical values (after the optional
rounding), whatever container they came in: JSON lists, ``float32`` arrays, a
Fortran-ordered array.

With ``decimals`` set, values are rounded half-to-even to that many decimal places
first, ``-0.0`` becomes ``0.0`` and every NaN becomes the same NaN, so tiny numeric
noise (a different BLAS, a different reduction order) does not change the digest.

With ``dtype`` ``float32`` (or ``float16``) the values are compared and hashed as that
type (little-endian), for models that answer in reduced precision; the dtype is in the
digest's header, so digests of different dtypes never match.
"""

import hashlib
import json
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["DTYPES", "ENCODING", "OutputsError", "as_array", "canonical_bytes", "digest",
           "first_difference"]

ENCODING = "gameday-outputs-v1"
_DTYPE = np.dtype("<f8")
DTYPES: dict[str, np.dtype[Any]] = {"float64": np.dtype("<f8"), "float32": np.dtype("<f4"),
                                    "float16": np.dtype("<f2")}

Array = npt.NDArray[np.float64]


class OutputsError(ValueError):
    """Model outputs that cannot be read as a rectangular array of numbers."""


def as_array(outputs: Any) -> Array:
    """``outputs`` (nested lists or an array of numbers) as a C-ordered ``<f8`` array."""
    try:
        array = np.asarray(outputs)
    except ValueError as exc:  # ragged nested lists
        raise OutputsError(f"outputs are not rectangular: {exc}") from None
    if array.dtype == object or array.dtype.kind not in "biuf":
        raise OutputsError(f"outputs must be numbers, got dtype {array.dtype}")
    return np.ascontiguousarray(array, dtype=_DTYPE)


def _dtype(dtype: str) -> np.dtype[Any]:
    try:
        return DTYPES[dtype]
    except KeyError:
        raise OutputsError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}") from None


def _normalised(array: Array, decimals: int | None, dtype: str = "float64") -> Any:
    kind = _dtype(dtype)
    if kind != _DTYPE:
        array = array.astype(kind).astype(_DTYPE)  # the values the reduced type can hold
    if decimals is None:
        return np.ascontiguousarray(array, dtype=kind)
    rounded = np.round(array, decimals)
    rounded = rounded + 0.0  # -0.0 + 0.0 is +0.0
    rounded[np.isnan(rounded)] = np.nan  # one NaN bit pattern
    return np.ascontiguousarray(rounded, dtype=kind)


def canonical_bytes(outputs: Any, decimals: int | None = None, dtype: str = "float64") -> bytes:
    """The bytes the digest is taken over: header, NUL, values."""
    array = _normalised(as_array(outputs), decimals, dtype)
    header = json.dumps({"encoding": ENCODING, "dtype": array.dtype.str, "order": "C",
                         "shape": list(array.shape), "decimals": decimals},
                        sort_keys=True, separators=(",", ":"))
    values: bytes = array.tobytes(order="C")
    return header.encode("ascii") + b"\0" + values


def digest(outputs: Any, decimals: int | None = None, dtype: str = "float64") -> str:
    """SHA-256 (hex) of the canonical encoding of ``outputs``."""
    return hashlib.sha256(canonical_bytes(outputs, decimals, dtype)).hexdigest()


def first_difference(a: Any, b: Any, decimals: int | None = None,
                     dtype: str = "float64") -> tuple[int, float] | None:
    """Where two output sets first differ, as ``(flat_index, max_abs_error)``; None if equal.

    Equality is the digest's: bit-identical values after the optional rounding. The flat
    index is in C order. ``max_abs_error`` is the largest ``|a - b|`` over all positions
    (unrounded), ``inf`` where only one side is NaN or the shapes differ; for shapes that
    differ the index is the first differing position of the common prefix, else its end.
    """
    left, right = as_array(a), as_array(b)
    flat_left = _normalised(left, decimals, dtype).ravel()
    flat_right = _normalised(right, decimals, dtype).ravel()
    common = min(flat_left.size, flat_right.size)
    bits = f"<u{flat_left.dtype.itemsize}"
    differs = (flat_left[:common].view(bits) != flat_right[:common].view(bits))
    positions = np.flatnonzero(differs)
    if left.shape != right.shape:
        index = int(positions[0]) if positions.size else common
        return index, float("inf")
    if not positions.size:
        return None
    raw_left, raw_right = left.ravel(), right.ravel()
    nan_left, nan_right = np.isnan(raw_left), np.isnan(raw_right)
    with np.errstate(invalid="ignore", over="ignore"):
        errors = np.abs(raw_left - raw_right)
    errors[(raw_left == raw_right) | (nan_left & nan_right)] = 0.0  # also inf == inf
    errors[nan_left ^ nan_right] = np.inf
    return int(positions[0]), float(np.max(errors))
