"""Every fault kind, by name: the built-in families and the kinds users register.

:data:`CATALOGUE` holds the built-in kinds in family order (what ``gameday faults`` and
docs/faults.md list); :func:`register` adds a kind of a user's own (docs/extending.md),
which :func:`lookup` and :func:`parse` then know on both sides, like a built-in one.

A family's declarations are imported when one of its kinds is first looked up, not
when this module is: checking an experiment whose activities inject no fault (or only
GPU faults) imports no other family's spec module. :data:`FAMILIES` is the one list of
the built-in families; reading the catalogue whole (iterating it, ``len``) loads them all.
"""

import functools
import importlib
import threading
from collections.abc import Iterator, Mapping
from typing import TypeVar

from gameday.errors import InvalidInput
from gameday.kinds.params import shown
from gameday.kinds.spec import KindParams, KindSpec

__all__ = ["CATALOGUE", "FAMILIES", "by_activity", "lookup", "parse", "register"]

#: The built-in families, in catalogue order. Family ``gpu``'s kinds are named
#: ``gpu.*``, declared in :mod:`gameday.kinds.gpu` (its ``KINDS``) and injected by the
#: activities of :mod:`faults.gpu`; tests/kinds/test_kinds_lazy.py holds every kind to it.
FAMILIES = ("gpu", "net", "service", "k8s", "storage", "process", "node")


@functools.cache
def family_kinds(family: str) -> dict[str, KindSpec[KindParams]]:
    """The kinds of built-in ``family`` by name (importing its module the first time);
    empty for a name that is no family."""
    if family not in FAMILIES:
        return {}
    module = importlib.import_module(f"gameday.kinds.{family}")
    kinds: tuple[KindSpec[KindParams], ...] = module.KINDS
    return {kind.name: kind for kind in kinds}


@functools.cache
def _every_kind() -> dict[str, KindSpec[KindParams]]:
    return {name: kind for family in FAMILIES for name, kind in family_kinds(family).items()}


def _builtin(name: str) -> KindSpec[KindParams] | None:
    return family_kinds(name.partition(".")[0]).get(name)


class Catalogue(Mapping[str, KindSpec[KindParams]]):
    """The built-in kinds by name, in family order, read-only: a name loads its own
    family only; iterating (or ``len``) loads every family."""

    def __getitem__(self, name: str) -> KindSpec[KindParams]:
        kind = _builtin(name) if isinstance(name, str) else None
        if kind is None:
            raise KeyError(name)
        return kind

    def __iter__(self) -> Iterator[str]:
        return iter(_every_kind())

    def __len__(self) -> int:
        return len(_every_kind())

    def __repr__(self) -> str:
        return f"Catalogue({_every_kind()!r})"


CATALOGUE: Mapping[str, KindSpec[KindParams]] = Catalogue()

P = TypeVar("P", bound=KindParams)

_registered: dict[str, KindSpec[KindParams]] = {}
_lock = threading.Lock()


def register(kind: KindSpec[P]) -> KindSpec[P]:
    """Make a kind of one's own known (its agent backend and its activity then parse with
    it); returns it. Registering the same declaration again is harmless; another kind
    under a taken name is a :class:`ValueError`."""
    with _lock:
        known = _builtin(kind.name) or _registered.get(kind.name)
        if known is not None and known != kind:
            raise ValueError(f"fault kind {kind.name} is already declared")
        _registered[kind.name] = kind
    return kind


def lookup(name: str) -> KindSpec[KindParams] | None:
    """The declaration of kind ``name`` (built-in or registered), if any."""
    return _builtin(name) or _registered.get(name)


def parse(kind: str, params: object, *, path: str = "params") -> KindParams:
    """The typed parameters of a ``kind`` request, or :class:`InvalidInput` with the key
    path (an undeclared kind is refused too)."""
    spec = lookup(kind) if isinstance(kind, str) else None
    if spec is None:
        raise InvalidInput(f"no declared fault kind {shown(kind)}", path="kind")
    return spec.parse(params, path=path)


def by_activity(module: str, func: str) -> KindSpec[KindParams] | None:
    """The built-in kind an activity (``faults.gpu.ecc_error``) injects, if any (what
    ``validate``, ``plan`` and coverage check before a run; a registered kind of a
    user's own is checked by its activity and by the agent). Only the activity's own
    family is loaded: ``os.path.isdir`` loads none."""
    package, _, family = module.partition(".")
    if package != "faults":
        return None
    for kind in family_kinds(family).values():
        if kind.module == module and kind.func == func:
            return kind
    return None
