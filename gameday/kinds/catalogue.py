"""Every fault kind, by name: the built-in families and the kinds users register.

:data:`CATALOGUE` holds the built-in kinds in family order (what ``gameday faults`` and
docs/faults.md list); :func:`register` adds a kind of a user's own (docs/extending.md),
which :func:`lookup` and :func:`parse` then know on both sides, like a built-in one.
"""

import threading
from typing import TypeVar

from gameday.errors import InvalidInput
from gameday.kinds import gpu, k8s, net, node, process, service, storage
from gameday.kinds.params import shown
from gameday.kinds.selectors import Selector
from gameday.kinds.spec import KindParams, KindSpec

__all__ = ["CATALOGUE", "FAMILIES", "SELECTORS", "by_activity", "lookup", "parse", "register"]

FAMILIES = (gpu, net, service, k8s, storage, process, node)

CATALOGUE: dict[str, KindSpec[KindParams]] = {
    kind.name: kind for family in FAMILIES for kind in family.KINDS}

#: Every selector a built-in kind accepts, by its argument name and keys.
SELECTORS: tuple[Selector, ...] = tuple(dict.fromkeys(
    kind.selects for kind in CATALOGUE.values() if kind.selects is not None))

P = TypeVar("P", bound=KindParams)

_registered: dict[str, KindSpec[KindParams]] = {}
_lock = threading.Lock()


def register(kind: KindSpec[P]) -> KindSpec[P]:
    """Make a kind of one's own known (its agent backend and its activity then parse with
    it); returns it. Registering the same declaration again is harmless; another kind
    under a taken name is a :class:`ValueError`."""
    with _lock:
        known = CATALOGUE.get(kind.name) or _registered.get(kind.name)
        if known is not None and known != kind:
            raise ValueError(f"fault kind {kind.name} is already declared")
        _registered[kind.name] = kind
    return kind


def lookup(name: str) -> KindSpec[KindParams] | None:
    """The declaration of kind ``name`` (built-in or registered), if any."""
    return CATALOGUE.get(name) or _registered.get(name)


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
    user's own is checked by its activity and by the agent)."""
    for kind in CATALOGUE.values():
        if kind.module == module and kind.func == func:
            return kind
    return None
