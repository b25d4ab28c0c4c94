"""Revert only some of a run's faults (by kind prefix), for activities such as
``faults.storage.revert`` that lift their own faults mid-method."""

from gameday.engine import session as sessions
from gameday.errors import AgentError, GamedayError, TargetUnavailable


def revert_kinds(prefix: str, reason: str = "rollback") -> int:
    """Revert every active fault whose kind starts with ``prefix``; return how many.

    Raises GamedayError (one line per failure) when any could not be reverted.
    """
    session = sessions.current()
    failures, done = [], 0
    for entry in session.ledger.active():
        if not entry.kind.startswith(prefix):
            continue
        try:
            fault = session.require_target().agent(entry.node).revert(entry.id)
            reverted_at = float(fault.get("reverted_at") or session.clock.now())
            session.ledger.record_reverted(entry.id, reverted_at,
                                           str(fault.get("revert_reason") or reason))
            session.event("fault_reverted", id=entry.id, kind=entry.kind, at=reverted_at)
            done += 1
        except (AgentError, TargetUnavailable) as exc:
            failures.append(f"{entry.kind} {entry.id} on {entry.node}: {exc}")
    if failures:
        raise GamedayError("could not revert: " + "; ".join(failures))
    return done
