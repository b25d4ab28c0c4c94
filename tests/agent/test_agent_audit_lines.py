"""The audit trail's lines (gameday/agent/audit.py): whatever a record holds (any code
point, bidirectional overrides, U+2028, lone surrogates, integers beyond 64 bits, what
the redaction makes of NaN), its line is ASCII, one line to any reader, and reads back
as the standard encoder's line of the same record."""

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gameday.agent.audit import _line
from gameday.agent.redaction import redact

any_text = st.text(st.characters(codec=None, categories=None)
                   | st.sampled_from("\u202e\u2028\u2029\u0085\x1b\n\"\\"), max_size=8)
scalars = (any_text | st.integers(min_value=-(2 ** 80), max_value=2 ** 80) | st.floats()
           | st.booleans() | st.none())
bodies = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(any_text, inner, max_size=3), max_leaves=12)


@settings(max_examples=300)
@given(body=bodies, path=any_text, status=st.sampled_from([200, 201, 400, None]))
def test_a_records_line_is_ascii_one_line_and_the_standard_encoders_value(
        body: Any, path: str, status: int | None) -> None:
    entry = {"time": 1_796_000_000.25, "phase": "intent", "path": path, "status": status,
             "params": redact(body)}
    line = _line(entry)
    assert line.isascii() and line.endswith(b"\n") and line.count(b"\n") == 1
    assert len(line.decode().splitlines()) == 1
    standard = json.dumps(entry, separators=(",", ":"), default=str)
    assert json.loads(line) == json.loads(standard)
    json.loads(line, parse_constant=pytest.fail)  # no NaN token: strict JSON
