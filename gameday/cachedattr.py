"""Attributes of immutable objects computed on first use and kept on them, and copies.

:class:`cached_attribute` is :func:`functools.cached_property` without its lock: on
Python 3.11 that one takes a lock shared by every instance of the class on each first
use (3.12 dropped it), which costs about as much as making a small JSON text. For an
immutable object the lock buys nothing: two threads that compute the value at once
compute the same value, and either may be kept.

:func:`copy_with` copies such an object with some fields changed, keeping the cached
values that still hold, and :func:`construct` makes one from its fields, both without
the frozen dataclass's ``__init__``. :meth:`cached_attribute.many` computes the value
for many objects at once (one JSON encoder call for a batch, say).
"""

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Generic, TypeVar, overload

__all__ = ["cached_attribute", "construct", "copy_with"]

T = TypeVar("T")


class cached_attribute(Generic[T]):  # named like the decorator it stands for
    """Decorate a method of an immutable class (with an instance ``__dict__``): its value,
    computed on first access, is kept in the instance's ``__dict__`` under the method's
    name, where later accesses find it without calling anything."""

    def __init__(self, compute: Callable[[Any], T]) -> None:
        self._compute = compute
        self._name = compute.__name__
        self.__doc__ = compute.__doc__

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    @overload
    def __get__(self, instance: None, owner: type | None = None) -> "cached_attribute[T]": ...

    @overload
    def __get__(self, instance: object, owner: type | None = None) -> T: ...

    def __get__(self, instance: object | None, owner: type | None = None
                ) -> "T | cached_attribute[T]":
        if instance is None:
            return self
        value = instance.__dict__[self._name] = self._compute(instance)
        return value

    def many(self, instances: Sequence[Any], compute: Callable[[list[Any]], list[T]]
             ) -> list[T]:
        """The value for each of ``instances``: those not computed yet are computed
        together, by ``compute`` (given them in order, it returns their values in
        order), and kept, as a first access would."""
        name = self._name
        missing = [instance for instance in instances if name not in instance.__dict__]
        if missing:
            for instance, value in zip(missing, compute(missing), strict=True):
                instance.__dict__[name] = value
        return [instance.__dict__[name] for instance in instances]


def construct(cls: type[T], values: dict[str, Any]) -> T:
    """An instance of ``cls``, an immutable (frozen) dataclass whose fields all live in
    its instance ``__dict__``, that takes ``values`` (fields and cached values) as that
    ``__dict__`` (so the caller hands the dict over, and never changes it after), made
    without ``__init__`` (which sets each field through ``object.__setattr__``): nothing
    checks ``values`` or fills in defaults, so the caller gives every field."""
    obj: T = object.__new__(cls)
    object.__setattr__(obj, "__dict__", values)
    return obj


def copy_with(obj: T, changes: Mapping[str, Any], *, stale: Iterable[str]) -> T:
    """A copy of ``obj`` with ``changes`` (to fields or cached values), without the cached
    values named in ``stale`` (those the changes make wrong; they are made again on
    first use). For an immutable (frozen) dataclass whose fields all live in its instance
    ``__dict__``: the copy is made without ``__init__``, which a frozen dataclass makes
    slow (each field set through ``object.__setattr__``), so nothing checks ``changes``:
    the caller names only fields it has."""
    copy: T = object.__new__(type(obj))
    values = vars(copy)
    values.update(vars(obj))
    for name in stale:
        values.pop(name, None)
    values.update(changes)
    return copy
