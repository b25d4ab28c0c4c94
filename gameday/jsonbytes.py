"""Compact JSON, as bytes, for the lines and bodies a fan-out writes per agent batch.

:func:`dumps` is orjson (a well-kept encoder in Rust), with the standard library's
encoder for what orjson does not take (an integer beyond 64 bits, nesting deeper than
254, an object JSON has no form for: the standard encoder then raises as it always did).
At 16,384 GPUs the standard library's C encoder was a tenth of the orchestrator's time
(the ledger's lines and the request bodies, ``bench/fleet.py --profile``); orjson encodes
the same events about six times faster.

The text is JSON without blanks, keys in the order given, non-ASCII characters as UTF-8
(not ``\\u`` escapes), a non-string key as its string; it decodes, with :func:`json.loads`,
to what ``json.dumps`` of the same value decodes to, except NaN and the infinities,
which are not JSON and become ``null``.
"""

import json
from typing import Final

import orjson

__all__ = ["dumps"]

_OPTIONS: Final = orjson.OPT_NON_STR_KEYS
_FALLBACK: Final = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False,
                                    check_circular=False)


def dumps(value: object) -> bytes:
    """``value`` as compact JSON (UTF-8)."""
    try:
        return orjson.dumps(value, option=_OPTIONS)
    except orjson.JSONEncodeError:
        return _FALLBACK.encode(value).encode("utf-8")
