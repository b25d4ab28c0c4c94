"""The agent's request bodies: nesting deeper than MAX_BODY_DEPTH is refused, whatever
the text looks like (gameday.wire.protocol.decode_body counts braces and brackets before
it measures: a body with no more of them than the limit cannot be deeper)."""

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gameday.errors import InvalidInput
from gameday.wire.protocol import MAX_BODY_DEPTH, decode_body

#: Strings that look like nesting (and are not), to fool a count of the text.
brackety = st.text(alphabet="{}[]\"\\ax", max_size=6)


def depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max(map(depth, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(depth, value), default=0)
    return 0


@st.composite
def nested(draw: st.DrawFn) -> Any:
    """A value nested to a depth near the limit, with bracket-laden strings and siblings."""
    levels = draw(st.integers(min_value=0, max_value=MAX_BODY_DEPTH + 3))
    value: Any = draw(brackety | st.integers() | st.none())
    for _ in range(levels):
        siblings = draw(st.lists(brackety | st.integers(), max_size=2))
        if draw(st.booleans()):
            value = {draw(brackety): value, **{f"s{i}": s for i, s in enumerate(siblings)}}
        else:
            value = [*siblings, value] if draw(st.booleans()) else [value, *siblings]
    return value


@settings(max_examples=300)
@given(nested())
def test_a_body_is_refused_exactly_when_it_nests_deeper_than_the_limit(value: Any) -> None:
    raw = json.dumps(value).encode()
    if depth(value) > MAX_BODY_DEPTH:
        with pytest.raises(InvalidInput, match=f"nested deeper than {MAX_BODY_DEPTH}"):
            decode_body(raw)
    else:
        assert decode_body(raw) == value


def test_the_edges_of_the_limit() -> None:
    for levels, refused in ((MAX_BODY_DEPTH, False), (MAX_BODY_DEPTH + 1, True)):
        raw = ("[" * levels + "]" * levels).encode()
        padded = b'{"pad": "' + b"{" * 40 + b'", "v": ' + raw + b"}"  # braces in a string
        for body in (raw, padded):
            extra = body is padded  # the object around the array is one more level
            if refused or (extra and levels == MAX_BODY_DEPTH):
                with pytest.raises(InvalidInput, match="nested deeper"):
                    decode_body(body)
            else:
                assert depth(decode_body(body)) == levels
