"""What the agent shows of a request where its values may not go: the audit trail and
the unauthenticated ``/metrics``.

:func:`redact` is the one redaction of the agent: the value of every key that names a
secret (:data:`gameday.logs.SECRET_WORDS`) and every value of a process selector's
``env`` (an environment value is a secret as often as not) become ``"[redacted]"``, at
any depth up to :data:`MAX_DEPTH` (deeper is cut to ``"[too deep]"``); NaN and the
infinities, which JSON cannot hold, become their words (``"NaN"``, ``"Infinity"``,
``"-Infinity"``). It never raises: whatever it is given, it answers.
:func:`describe_target` is the one line a fault's target is shown as on ``/metrics``,
made from :func:`redact`'s answer.
"""

import itertools
import json
import math
from collections.abc import Mapping
from typing import Any, Final

from gameday.logs import REDACTED, names_secret

__all__ = ["MAX_DEPTH", "REDACTED", "describe_target", "redact"]

#: Levels kept; a request body deeper than this is refused before it is redacted.
MAX_DEPTH: Final = 32
#: Longest string kept on the open surface (a label value), in characters.
_LABEL_CHARS: Final = 120
#: The scalars shown as they are (exactly these types: a subclass, and a float, which may
#: not be finite, take the long way).
_AS_THEY_ARE: Final = frozenset({str, int, bool, type(None)})
#: Keys whose every value is redacted, whatever the value's own key says.
_SECRET_VALUED: Final = frozenset({"env"})
#: The deepest level at which a mapping shows its plain scalar items itself, without a
#: call: their own level, one below, is still above the cut.
_LAST_LEVEL: Final = MAX_DEPTH - 2


def redact(value: Any) -> Any:
    """``value`` with secrets redacted (see the module doc); plain JSON types only
    (anything else is shown by its ``str``). Never raises."""
    try:
        return _redact(value, 0, under_secret=False)
    except Exception:  # a str() that raises, say: nothing of it is shown
        return REDACTED


def _redact(value: Any, depth: int, *, under_secret: bool) -> Any:
    if depth >= MAX_DEPTH:
        return "[too deep]"
    kind = type(value)
    if kind in _AS_THEY_ARE:  # exactly: the common case first, as the checks below
        return REDACTED if under_secret else value
    if kind is float:
        return REDACTED if under_secret else _finite(value)
    if kind is dict or isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, item in itertools.islice(value.items(), 1024):
            name = key if type(key) is str else str(key)
            if under_secret or names_secret(name):
                out[name] = REDACTED
            elif name in _SECRET_VALUED:
                out[name] = _redact(item, depth + 1, under_secret=True)
            elif type(item) in _AS_THEY_ARE and depth <= _LAST_LEVEL:
                out[name] = item  # a plain scalar one level down: as it is, without a call
            else:
                out[name] = _redact(item, depth + 1, under_secret=False)
        return out
    if kind is list or isinstance(value, list | tuple):
        return [_redact(item, depth + 1, under_secret=under_secret) for item in value[:1024]]
    if under_secret:
        return REDACTED
    if value is None or isinstance(value, bool | int | float | str):
        return _finite(value)
    return str(value)


def _finite(value: Any) -> Any:
    """``value``, or a non-finite float's word (as ``json`` would have written it)."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if value != value else "Infinity" if value > 0 else "-Infinity"
    return value


#: Compact JSON with sorted keys, made once (``json.dumps`` with arguments makes an encoder
#: per call: a window per fault described its target's every value with one).
_LABEL_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"))


def describe_target(target: Mapping[str, Any]) -> str:
    """``key=value,...`` (sorted keys) of the redacted ``target``, nested values as
    compact JSON, each value cut to 120 characters: what ``/metrics`` shows."""
    shown = redact(dict(target))
    if not isinstance(shown, Mapping):
        return REDACTED
    parts = []
    for key in sorted(shown):
        value = shown[key]
        text = value if isinstance(value, str) else _LABEL_ENCODER.encode(value)
        parts.append(f"{key}={text[:_LABEL_CHARS]}")
    return ",".join(parts)
