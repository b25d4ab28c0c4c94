"""The agent's one redaction (gameday/agent/redaction.py), over random keys: a key's
value is redacted exactly when its name, lowercased, holds a secret word, however long
the name; the short names' answers are remembered, the long ones' never are
(gameday.logs.names_secret, the one such check)."""

import enum
import json
import math
import types
from collections.abc import Mapping
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gameday import logs
from gameday.agent.redaction import REDACTED, redact
from gameday.logs import SECRET_WORDS

#: A secret word somewhere in a name, in any case, padded to any length.
names = st.builds(
    lambda before, word, after, secret: before + (word if secret else "") + after,
    st.text(max_size=90), st.sampled_from(SECRET_WORDS).map(str.upper)
    | st.sampled_from(SECRET_WORDS) | st.sampled_from(["Api_Key", "PassWord", "tOkEn"]),
    st.text(max_size=90), st.booleans())


@settings(max_examples=300)
@given(st.dictionaries(names, st.integers() | st.text(max_size=5), max_size=6))
def test_a_value_is_redacted_exactly_when_its_key_names_a_secret(
        body: dict[str, Any]) -> None:
    shown = redact({"outer": body})["outer"]
    for key, value in body.items():
        secret = key == "env" or any(word in key.lower() for word in SECRET_WORDS)
        assert shown[key] == (REDACTED if secret else value), key


def test_long_names_are_not_remembered() -> None:
    remembered = logs._short_name_secret.cache_info().currsize
    long_names = {f"{'x' * 65}{n}": n for n in range(100)}
    redact({**long_names, f"{'y' * 70}TOKEN": "s3cr3t"})
    assert logs._short_name_secret.cache_info().currsize == remembered
    assert redact({f"{'y' * 70}TOKEN": "s3cr3t"}) == {f"{'y' * 70}TOKEN": REDACTED}


class Level(enum.IntEnum):
    HIGH = 3


class Word(str):
    pass


class Shown:
    def __str__(self) -> str:
        return "shown"


def model(value: Any, depth: int = 0, under_secret: bool = False) -> Any:
    """The module's doc, read plainly: secrets' and ``env``'s values redacted at any
    depth, 1,024 items a level, cut below 32 levels, anything not JSON by its str (NaN
    and the infinities by their words)."""
    if depth >= 32:
        return "[too deep]"
    if isinstance(value, Mapping):
        return {str(k): REDACTED if under_secret or any(w in str(k).lower() for w in SECRET_WORDS)
                else model(v, depth + 1, str(k) == "env") for k, v in list(value.items())[:1024]}
    if isinstance(value, list | tuple):
        return [model(item, depth + 1, under_secret) for item in value[:1024]]
    if under_secret:
        return REDACTED
    if isinstance(value, float) and not math.isfinite(value):
        return json.dumps(value)  # NaN, Infinity, -Infinity: as words
    return value if value is None or isinstance(value, bool | int | float | str) else str(value)


scalars = (st.integers() | st.floats() | st.text(max_size=4) | st.booleans() | st.none()
           | st.sampled_from([Level.HIGH, Word("w"), Shown()]))
keys = names | st.sampled_from(["env", "ENV", "x"]) | st.integers()
trees = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3)
                     | st.tuples(inner, inner) | st.dictionaries(keys, inner, max_size=3)
                     | st.dictionaries(keys, inner, max_size=2).map(types.MappingProxyType),
                     max_leaves=20)


def deep(levels: int, leaf: Any) -> Any:
    for _ in range(levels):
        leaf = {"k": leaf} if levels % 2 else [leaf]
    return leaf


@settings(max_examples=400)
@given(trees | st.builds(deep, st.integers(min_value=28, max_value=36), trees)
       | st.lists(st.integers(), min_size=1020, max_size=1030))
def test_redaction_is_its_doc(value: Any) -> None:
    assert same(redact(value), model(value))


def same(a: Any, b: Any) -> bool:
    """Equal, of the same types, in the same order."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(map(same, a, b))
    return a == b
