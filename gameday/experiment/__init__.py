"""Experiments as documents: loading, validation, the ``gameday`` extension, typed field access."""
