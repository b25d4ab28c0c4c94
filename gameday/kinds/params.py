"""One parameter of a fault kind: its type, default, bounds and choices, and the check
that holds a value to them.

A kind's parameters are the fields of a frozen dataclass (:class:`gameday.kinds.spec.KindParams`);
each field is declared with :func:`param` (it has a default) or :func:`required`, and its
annotation gives the type (``int``, ``float``, ``bool``, ``str``, ``tuple[str, ...]``,
``Literal[...]`` for choices, ``X | None`` for a parameter that may be null).
:func:`params_of` reads them back as :class:`Param` objects, which check a value and
describe it (words for errors and docs, a JSON Schema property for the catalogue).

Checks never descend into a value they refuse: a wrong value is named by its type and
a short prefix (:func:`shown`), so a deeply nested or huge value costs no recursion.
"""

import dataclasses
import types
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar, Union, get_args, get_origin

from gameday.errors import InvalidInput

__all__ = ["Param", "param", "params_of", "required", "shown", "shown_key"]

T = TypeVar("T")

_META = "gameday.kinds"
_TYPE_NAMES = {int: "an integer", float: "a number", bool: "a boolean", str: "a string",
               tuple: "a list"}
_SCHEMA_TYPES = {int: "integer", float: "number", bool: "boolean", str: "string",
                 tuple: "array"}
#: How much of a refused value an error shows.
SHOWN_CHARS = 60


def shown(value: object) -> str:
    """A refused value in an error: scalars as ``repr`` (cut to :data:`SHOWN_CHARS`),
    containers by their type and size only (never walked, so never recursive)."""
    if isinstance(value, dict):
        return f"a mapping of {len(value)} keys"
    if isinstance(value, list | tuple):
        return f"a list of {len(value)} items"
    if value is None or isinstance(value, bool | int | float | str):
        text = repr(value)
        return text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS] + "...'"
    return f"a {type(value).__name__}"


def shown_key(key: str) -> str:
    """A key as a key path shows it: cut to :data:`SHOWN_CHARS` (then ``...``), every
    character that does not print escaped (so the error stays one readable line)."""
    cut = key if len(key) <= SHOWN_CHARS else key[:SHOWN_CHARS] + "..."
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in cut)


@dataclass(frozen=True)
class _Bounds:
    doc: str
    choices: tuple[Any, ...] | None = None
    minimum: float | None = None
    maximum: float | None = None
    exclusive_minimum: bool = False
    #: each item of a list parameter: the items it may hold (None: any string)
    items: Callable[[str, str], None] | None = None


def param(doc: str, *, default: T, choices: Sequence[Any] | None = None,
          minimum: float | None = None, maximum: float | None = None,
          exclusive_minimum: bool = False,
          items: Callable[[str, str], None] | None = None) -> T:
    """A parameter with a default (a dataclass field of a kind's parameters)."""
    bounds = _Bounds(doc, tuple(choices) if choices is not None else None, minimum, maximum,
                     exclusive_minimum, items)
    return dataclasses.field(default=default, metadata={_META: bounds})


def required(doc: str, *, choices: Sequence[Any] | None = None, minimum: float | None = None,
             maximum: float | None = None, exclusive_minimum: bool = False) -> Any:
    """A parameter every request must give (a dataclass field without a default)."""
    bounds = _Bounds(doc, tuple(choices) if choices is not None else None, minimum, maximum,
                     exclusive_minimum)
    return dataclasses.field(metadata={_META: bounds})


@dataclass(frozen=True)
class Param:
    """One parameter of a fault kind, as its dataclass field declares it."""

    name: str
    type: type
    doc: str
    default: Any = None
    required: bool = False
    choices: tuple[Any, ...] | None = None
    minimum: float | None = None
    maximum: float | None = None
    exclusive_minimum: bool = False
    nullable: bool = False
    items: Callable[[str, str], None] | None = None

    def check(self, value: Any, path: str) -> Any:
        """The value (an int where a number is expected becomes a float; a list becomes a
        tuple), or :class:`InvalidInput` naming ``path``."""
        if value is None:
            if self.nullable:
                return None
            raise InvalidInput("is required" if self.required else
                               f"must be {self.type_name}, got null", path=path)
        expected = self.type
        if expected is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if expected is tuple and isinstance(value, list):
            value = tuple(value)
        if (isinstance(value, bool) and expected is not bool) or not isinstance(value, expected):
            raise InvalidInput(f"must be {self.type_name}, got {shown(value)}", path=path)
        if expected is float and value != value:  # NaN passes no bound
            raise InvalidInput("must be a number, got nan", path=path)
        if self.choices is not None and value not in self.choices:
            listed = ", ".join(str(c) for c in self.choices)
            raise InvalidInput(f"must be one of {listed}, got {shown(value)}", path=path)
        if isinstance(value, tuple):
            self._check_items(value, path)
        return self._check_range(value, path)

    def _check_items(self, value: tuple[Any, ...], path: str) -> None:
        if not value:
            raise InvalidInput("must hold at least one item", path=path)
        for index, item in enumerate(value):
            if not isinstance(item, str):
                raise InvalidInput(f"must be a string, got {shown(item)}",
                                   path=f"{path}[{index}]")
            if self.items is not None:
                self.items(item, f"{path}[{index}]")

    def _check_range(self, value: Any, path: str) -> Any:
        if self.minimum is not None:
            if self.exclusive_minimum and value <= self.minimum:
                raise InvalidInput(f"must be > {self.minimum}, got {shown(value)}", path=path)
            if value < self.minimum:
                raise InvalidInput(f"must be >= {self.minimum}, got {shown(value)}", path=path)
        if self.maximum is not None and value > self.maximum:
            raise InvalidInput(f"must be <= {self.maximum}, got {shown(value)}", path=path)
        return value

    @property
    def type_name(self) -> str:
        """The type in words: ``an integer``, ``a number``, ..."""
        return _TYPE_NAMES.get(self.type, self.type.__name__)

    def to_json(self) -> dict[str, Any]:
        """The parameter as a JSON Schema property (``type``, ``description``, ``default``,
        ``enum``, bounds; a nullable one's type also allows ``null``; a list's ``items``)."""
        kind = _SCHEMA_TYPES[self.type]
        schema: dict[str, Any] = {"type": [kind, "null"] if self.nullable else kind,
                                  "description": self.doc}
        if self.default is not None:
            schema["default"] = list(self.default) if self.type is tuple else self.default
        if self.choices:
            schema["enum"] = [*self.choices, None] if self.nullable else list(self.choices)
        if self.minimum is not None:
            schema["exclusiveMinimum" if self.exclusive_minimum else "minimum"] = self.minimum
        if self.maximum is not None:
            schema["maximum"] = self.maximum
        if self.type is tuple:
            schema["items"] = {"type": "string"}
            schema["minItems"] = 1
        return schema


def params_of(cls: type) -> tuple[Param, ...]:
    """The parameters a kind's dataclass declares, in field order."""
    hints = typing.get_type_hints(cls, include_extras=False)
    found = []
    for spec in dataclasses.fields(cls):
        bounds = spec.metadata.get(_META)
        if not isinstance(bounds, _Bounds):
            raise TypeError(f"{cls.__name__}.{spec.name}: declare it with param() or required()")
        base, nullable, choices = _annotation(hints[spec.name], f"{cls.__name__}.{spec.name}")
        is_required = spec.default is dataclasses.MISSING
        found.append(Param(
            name=spec.name, type=base, doc=bounds.doc,
            default=None if is_required else spec.default, required=is_required,
            choices=bounds.choices if bounds.choices is not None else choices,
            minimum=bounds.minimum, maximum=bounds.maximum,
            exclusive_minimum=bounds.exclusive_minimum, nullable=nullable, items=bounds.items))
    return tuple(found)


def _annotation(hint: Any, where: str) -> tuple[type, bool, tuple[Any, ...] | None]:
    """``(base type, nullable, choices)`` of a field's annotation."""
    nullable = False
    if get_origin(hint) in (Union, types.UnionType):
        members = [arg for arg in get_args(hint) if arg is not type(None)]
        nullable = len(members) < len(get_args(hint))
        if len(members) != 1:
            raise TypeError(f"{where}: one type, optionally | None")
        hint = members[0]
    if get_origin(hint) is Literal:
        choices = get_args(hint)
        return type(choices[0]), nullable, choices
    if get_origin(hint) is tuple:
        return tuple, nullable, None
    if hint in _TYPE_NAMES:
        return typing.cast(type, hint), nullable, None
    raise TypeError(f"{where}: a parameter is int, float, bool, str, tuple[str, ...] or a "
                    f"Literal, not {hint!r}")
