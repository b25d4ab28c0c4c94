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
#: Any code point, lone surrogates too (which a JSON ``\ud800`` escape decodes to).
any_text = st.text(st.characters(codec=None, categories=None), max_size=6)
values = st.recursive(
    plain | st.integers(min_value=-(2 ** 80), max_value=2 ** 80) | any_text,
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
    assert jsonbytes.dumps({"name": "\ud800\u00e9"}) == b'{"name":"\\ud800\\u00e9"}'
    with pytest.raises(TypeError):
        jsonbytes.dumps({"path": object()})


texts = st.one_of(
    values.map(json.dumps),
    st.floats().map(lambda x: json.dumps({"x": x})),  # NaN, the infinities: not JSON
    st.text(max_size=12).map(lambda t: json.dumps(t, ensure_ascii=False)),
    st.sampled_from(['"\\ud800"', "[1,]", "01", "{\"a\":1,\"a\":2}", " [1] ", "nul",
                     "1e400", "-0", "[" * 300 + "]" * 300, '"\\u00e9"', "", "\ufeff1"]),
    st.text(max_size=10))


@given(text=texts)
def test_loads_takes_what_json_takes_and_reads_it_the_same(text: str) -> None:
    """For JSON, not-quite JSON and not JSON at all, as text and as UTF-8 bytes:
    :func:`jsonbytes.loads` gives what :func:`json.loads` gives (an integer beyond 64
    bits as the nearest float), or raises :class:`ValueError` where it does."""
    for given_ in (text, text.encode("utf-8", "surrogatepass")):
        try:
            expected = json.loads(given_)
        except ValueError:
            with pytest.raises(ValueError):
                jsonbytes.loads(given_)
            continue
        got = jsonbytes.loads(given_)
        # (NaN != NaN: compare the text; an integer beyond 64 bits is read as a float)
        assert json.dumps(got) == json.dumps(beyond_64_bits_as_floats(expected))


def beyond_64_bits_as_floats(value: object) -> object:
    if isinstance(value, int) and not isinstance(value, bool) and not (
            -2 ** 63 <= value < 2 ** 64):
        return float(value)
    if isinstance(value, list):
        return [beyond_64_bits_as_floats(v) for v in value]
    if isinstance(value, dict):
        return {k: beyond_64_bits_as_floats(v) for k, v in value.items()}
    return value
