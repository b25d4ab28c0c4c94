"""What every fault action shares: gameday errors become the toolkit's ``ActivityFailed``.

A fault action fails the run with one line; these helpers (the public
:mod:`gameday.activity` functions, plus the parse of the kind's declaration in
:mod:`gameday.kinds`) give every module the same validation and revert behaviour.
"""

from typing import Any

from gameday.activity import failing as failing_activity
from gameday.activity import revert_all as revert_run
from gameday.kinds import KindParams, KindSpec

__all__ = ["failing_activity", "revert_run", "validated"]


def validated(kind: KindSpec[KindParams], arguments: dict[str, Any]) -> dict[str, Any]:
    """The kind's parameters parsed by its declaration (defaults filled in), as the JSON
    the agent is sent, or ActivityFailed naming the argument. An argument the activity
    got as ``None`` for a parameter that cannot be null means "its default"."""
    nullable = {param.name for param in kind.params if param.nullable}
    given = {name: value for name, value in arguments.items()
             if value is not None or name in nullable}
    with failing_activity():
        return kind.parse(given, path="arguments").to_json()
