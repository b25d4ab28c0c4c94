"""gameday/jsonbytes.py: orjson's compact JSON decodes to what the standard encoder's
does, for any JSON-like value (hypothesis), and what orjson does not take goes to the
standard encoder (integers beyond 64 bits, deep nesting) or fails as it did."""

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gameday import jsonbytes
from tests.json_values import plain

keys = st.text(max_size=6) | st.integers(-5, 5) | st.booleans() | st.none()
values = st.recursive(
    plain | st.integers(min_value=-(2 ** 80), max_value=2 ** 80),
    lambda inner: st.lists(inner, max_size=3) | st.tuples(inner, inner)
    | st.dictionaries(keys, inner, max_size=3), max_leaves=10)


@given(value=values)
def test_the_text_decodes_to_what_the_standard_encoders_does(value: object) -> None:
    text = jsonbytes.dumps(value)
    assert json.loads(text) == json.loads(json.dumps(value))
    assert b"\n" not in text


def test_what_orjson_does_not_take_goes_to_the_standard_encoder() -> None:
    deep: object = 1
    for _ in range(300):
        deep = [deep]
    assert json.loads(jsonbytes.dumps(deep)) == deep
    assert jsonbytes.dumps({"seed": 2 ** 70}) == b'{"seed":1180591620717411303424}'
    assert jsonbytes.dumps({"name": "n\u00e9"}) == '{"name":"n\u00e9"}'.encode()
    with pytest.raises(TypeError):
        jsonbytes.dumps({"path": object()})
