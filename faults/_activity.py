"""What every fault action shares: gameday errors become the toolkit's ``ActivityFailed``.

A fault action fails the run with one line; these helpers (the public
:mod:`gameday.activity` functions, plus the catalogue's validation) give every module the
same validation and revert behaviour.
"""

from typing import Any

from faults.base import FaultKind
from gameday.activity import failing as failing_activity
from gameday.activity import revert_all as revert_run

__all__ = ["failing_activity", "revert_run", "validated"]


def validated(kind: FaultKind, arguments: dict[str, Any]) -> dict[str, Any]:
    """The kind's parameters checked (defaults filled in), or ActivityFailed."""
    with failing_activity():
        return kind.validate(arguments)
