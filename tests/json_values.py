"""Hypothesis strategies for plain JSON values, as an agent's answers and the ledger's
lines hold them: ``plain`` (any JSON value, a few leaves deep, finite numbers) and
``objects`` (small JSON objects of them)."""

from hypothesis import strategies as st

plain = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8)
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                               max_size=3),
    max_leaves=8)
objects = st.dictionaries(st.text(max_size=6), plain, max_size=4)
