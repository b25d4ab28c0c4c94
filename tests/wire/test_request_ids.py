"""A request id (the idempotency key an inject carries, gameday.wire.protocol): accepted
exactly when it is 1 to 128 characters, each printable ASCII other than the space
(``!`` to ``~``), over random text, near-misses at each edge, and values of other types."""

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gameday.errors import InvalidInput
from gameday.wire.protocol import MAX_REQUEST_ID, check_request_id, parse_inject

#: Characters at and around the edges of the allowed range, and beyond ASCII.
edges = st.sampled_from([" ", "!", "~", "\x7f", "\x00", "\n", "\t", "\u00e9", "\u2028",
                         "\U0001f600", "a", "Z", "0", "-", ":"])
ids = st.text(alphabet=edges | st.characters(), max_size=MAX_REQUEST_ID + 3)


def is_request_id(value: object) -> bool:
    return (isinstance(value, str) and 1 <= len(value) <= MAX_REQUEST_ID
            and all("!" <= c <= "~" for c in value))


@settings(max_examples=500)
@given(ids | st.text(alphabet="!~az09", min_size=MAX_REQUEST_ID - 1,
                     max_size=MAX_REQUEST_ID + 1)
       | st.integers() | st.none() | st.lists(st.just("a"), max_size=2))
def test_a_request_id_is_accepted_exactly_when_it_is_one(value: Any) -> None:
    try:
        accepted = check_request_id(value, "request_id") == value
    except InvalidInput as exc:
        accepted = False
        assert str(exc).startswith("request_id must be 1 to 128 printable ASCII")
    assert accepted is is_request_id(value), repr(value)


@given(ids)
def test_an_inject_keeps_the_request_id_it_accepts(value: str) -> None:
    body = {"kind": "gpu.ecc", "target": {"gpu": 0}, "lease_s": 30, "request_id": value}
    try:
        request, _ = parse_inject(body)
    except InvalidInput:
        assert not is_request_id(value)
        return
    assert is_request_id(value) and request.request_id == value
