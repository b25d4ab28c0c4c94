"""JSON texts made cheaply (gameday/jsontext.py) must be, byte for byte, what the JSON
encoder writes: many objects cut out of one encoded list, and a flat object's text
with values put in. Real: the standard library's encoder, on generated objects, among
them strings that look like the places where texts are cut."""

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from gameday.jsontext import encode_objects, scalar_json, with_scalars
from gameday.lab.gpustate import fresh_gpu

COMPACT = json.JSONEncoder(separators=(",", ":"))
tricky = st.sampled_from(['},{', '}, {', '"gpu":', '{', '}', ',', '\\', '"', 'ü', ''])
texts = st.lists(tricky | st.text(max_size=4), max_size=3).map("".join)
scalars = (st.none() | st.booleans() | st.integers()
           | st.floats(allow_nan=False, allow_infinity=False))
plain = st.recursive(scalars | texts, lambda inner: st.lists(inner, max_size=3)
                     | st.dictionaries(texts, inner, max_size=3), max_leaves=6)
objects = st.dictionaries(texts, plain, max_size=4)


@given(st.lists(objects, max_size=6))
def test_objects_encoded_together_are_each_what_the_encoder_writes(
        batch: list[dict[str, Any]]) -> None:
    for encoder in (COMPACT, json.JSONEncoder(), json.JSONEncoder(indent=1)):
        assert encode_objects(encoder, batch) == [encoder.encode(obj) for obj in batch]


keys = st.sampled_from(["gpu", "count", "ecc_sbe_total", "name", "x1"]) | texts
flat = st.dictionaries(keys, scalars | texts | st.floats(), min_size=1, max_size=5)


@given(flat, st.data())
def test_values_put_into_a_text_read_as_the_encoder_writes_them(
        obj: dict[str, Any], data: st.DataObject) -> None:
    changed = data.draw(st.sets(st.sampled_from(sorted(obj)), max_size=len(obj)))
    changes = {key: data.draw(scalars | texts | st.floats()) for key in changed}
    text = with_scalars(COMPACT.encode(obj), changes)
    if text is not None:  # else: not safe here, the object is encoded again
        assert text == COMPACT.encode({**obj, **changes})
    simple = (all(scalar_json(v) is not None for v in (*obj.values(), *changes.values()))
              and all(key.isidentifier() and key.isascii() for key in changes)
              and "{" not in COMPACT.encode(obj)[1:])
    if simple:  # numbers, booleans and nulls under plain keys: always put in
        assert text is not None


def test_a_gpu_states_text_is_its_old_one_with_the_changes_put_in() -> None:
    healthy = fresh_gpu("node-0", 0)
    assert healthy.encoded == COMPACT.encode(healthy.to_json())
    hot = healthy.with_values({"temperature_c": 91.5, "clock_event_reasons": 0x60,
                               "present": False, "ecc_sbe_total": 10**20})
    assert "encoded" in vars(hot)  # made from the old text, not encoded again
    assert hot.encoded == COMPACT.encode(hot.to_json())
    named = healthy.with_values({"name": 'GPU "x", {y}'})  # a string: encoded again
    assert "encoded" not in vars(named)
    assert named.encoded == COMPACT.encode(named.to_json())
    assert named.with_values({"last_xid": 48}).encoded == COMPACT.encode(
        {**named.to_json(), "last_xid": 48})
