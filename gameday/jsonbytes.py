"""Compact JSON, as bytes, for the lines and bodies a fan-out writes per agent batch.

:func:`dumps` is orjson (a well-kept encoder in Rust), with the standard library's
encoder for what orjson does not take (an integer beyond 64 bits, nesting deeper than
254, a string holding a lone surrogate, an object JSON has no form for: the standard
encoder then raises as it always did).
At 16,384 GPUs the standard library's C encoder was a tenth of the orchestrator's time
(the ledger's lines and the request bodies, ``bench/fleet.py --profile``); orjson encodes
the same events about six times faster.

:func:`loads` reads with orjson too (the agent client's answers: json's decoder was 2 %
of a fleet fan-out; orjson reads an answer four times faster), and with the standard
library's decoder what orjson refuses (NaN and the infinities, lone surrogates): it
takes what :func:`json.loads` takes and gives the same value, but for an integer beyond
64 bits (below -2**63 or from 2**64), which it reads as the nearest float, as JavaScript
does (no agent answer holds one).

The text is JSON without blanks, keys in the order given, non-ASCII characters as UTF-8
(as ``\\u`` escapes where the standard encoder wrote the text), a non-string key as
its string; it decodes, with :func:`json.loads`, to what ``json.dumps`` of the same value
decodes to, except NaN and the infinities, which are not JSON and become ``null``.
"""

import json
from typing import Final

import orjson

__all__ = ["dumps", "loads"]

_OPTIONS: Final = orjson.OPT_NON_STR_KEYS
#: ASCII, so that a lone surrogate (which orjson refuses and UTF-8 cannot hold, but a
#: JSON ``\ud800`` escape decodes to) is written as its escape.
_FALLBACK: Final = json.JSONEncoder(separators=(",", ":"), check_circular=False)


def dumps(value: object) -> bytes:
    """``value`` as compact JSON (UTF-8)."""
    try:
        return orjson.dumps(value, option=_OPTIONS)
    except orjson.JSONEncodeError:
        return _FALLBACK.encode(value).encode("utf-8")


def loads(text: bytes | str) -> object:
    """The value of JSON ``text``, as :func:`json.loads` reads it (which raises
    :class:`ValueError` for what is not JSON)."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)
