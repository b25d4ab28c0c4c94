"""The agent's one redaction (gameday/agent/redaction.py), over random keys: a key's
value is redacted exactly when its name, lowercased, holds a secret word, however long
the name; the short names' answers are remembered, the long ones' never are."""

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gameday.agent import redaction
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
        secret = any(word in key.lower() for word in SECRET_WORDS)
        assert shown[key] == (REDACTED if secret else value), key


def test_long_names_are_not_remembered() -> None:
    remembered = redaction._short_name_secret.cache_info().currsize
    long_names = {f"{'x' * 65}{n}": n for n in range(100)}
    redact({**long_names, f"{'y' * 70}TOKEN": "s3cr3t"})
    assert redaction._short_name_secret.cache_info().currsize == remembered
    assert redact({f"{'y' * 70}TOKEN": "s3cr3t"}) == {f"{'y' * 70}TOKEN": REDACTED}
