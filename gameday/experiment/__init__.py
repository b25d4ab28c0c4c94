"""Experiments as documents: loading, the ``gameday`` extension (its silence too), typed field
access."""
