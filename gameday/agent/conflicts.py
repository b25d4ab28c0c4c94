"""Which fault already holds a kind on a target: the agent's conflict check.

Two faults conflict when they have the same kind and equal targets, equal as Python
compares dicts (``==``: key order does not matter, and ``1 == 1.0 == True``).
:func:`first_holder` looks through faults one by one; a :class:`TargetIndex` finds the
holder with a dict lookup, so that checking a batch of ``n`` faults against each other
and the active ones costs ``n`` lookups, not ``n * n`` comparisons.
"""

from collections.abc import Iterable, Mapping
from typing import Any, Generic, Protocol, TypeVar

__all__ = ["Held", "TargetIndex", "first_holder", "target_key"]


class Held(Protocol):
    """A fault as the conflict check sees it (:class:`gameday.agent.fault.Fault`)."""

    @property
    def kind(self) -> str: ...

    @property
    def target(self) -> Mapping[str, Any]: ...


def target_key(target: Mapping[str, Any]) -> frozenset[tuple[str, Any]] | None:
    """A hashable form of ``target``, equal for two targets exactly when they are equal
    (``==``), or ``None`` if a value of it cannot be hashed (a list, a dict)."""
    try:
        return frozenset(target.items())
    except TypeError:
        return None


F = TypeVar("F", bound=Held)


def first_holder(faults: Iterable[F], kind: str, target: Mapping[str, Any]) -> F | None:
    """The first of ``faults`` of ``kind`` on a target equal to ``target``, if any."""
    return next((f for f in faults if f.kind == kind and f.target == target), None)


class TargetIndex(Generic[F]):
    """Faults by kind and target, each kind held on a target by one of them: the one
    added first (as :func:`first_holder` would find it). A target that cannot be
    hashed (:func:`target_key`) is compared with the faults one by one, and so is a
    fault on such a target (JSON values never make it equal to a target that can be
    hashed)."""

    def __init__(self, faults: Iterable[F] = ()) -> None:
        self._keyed: dict[tuple[str, frozenset[tuple[str, Any]]], F] = {}
        self._loose: list[F] = []  # on targets that cannot be hashed
        self._all: list[F] = []  # in the order added
        for fault in faults:
            self.add(fault)

    def add(self, fault: F) -> F | None:
        """Add ``fault`` and return ``None``; or, if a fault added before holds its kind
        on an equal target, return that one, and leave ``fault`` out."""
        kind, target = fault.kind, fault.target
        key = target_key(target)
        if key is None:
            holder = first_holder(self._all, kind, target)
        else:
            holder = self._keyed.get((kind, key))
            if holder is None and self._loose:
                holder = first_holder(self._loose, kind, target)
        if holder is not None:
            return holder
        self._all.append(fault)
        if key is None:
            self._loose.append(fault)
        else:
            self._keyed[kind, key] = fault
        return None
