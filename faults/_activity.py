"""What every fault action shares: gameday errors become the toolkit's ``ActivityFailed``.

A fault action fails the run with one line; these helpers give every
module the same validation and revert behaviour.
"""

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from chaoslib.exceptions import ActivityFailed

from faults.base import FaultKind
from gameday.engine import session as sessions
from gameday.errors import GamedayError


@contextmanager
def failing_activity() -> Iterator[None]:
    """Turn a :class:`GamedayError` raised in the block into a one-line ActivityFailed."""
    try:
        yield
    except GamedayError as exc:
        raise ActivityFailed(str(exc)) from None


def validated(kind: FaultKind, arguments: dict[str, Any]) -> dict[str, Any]:
    """The kind's parameters checked (defaults filled in), or ActivityFailed."""
    with failing_activity():
        return kind.validate(arguments)


def revert_run() -> dict[str, Any]:
    """Revert every fault the run applied (idempotent); ActivityFailed if any is left."""
    session = sessions.current()
    before = len(session.ledger.active())
    failures = session.revert_all("rollback")
    if failures:
        raise ActivityFailed("could not revert: " + "; ".join(failures))
    return {"reverted": before}
