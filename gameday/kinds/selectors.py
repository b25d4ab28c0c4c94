"""The selectors a fault kind accepts: the keys of its target argument and their types.

A :class:`Selector` is what an experiment writes to say where a fault lands (``gpu:
{holding_shard: 0}``, ``link: {node: node-1}``); the run resolves it to agent targets.
Its check refuses unknown keys and values of the wrong type with the key path, and never
walks a value it refuses.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gameday.errors import InvalidInput
from gameday.kinds.params import shown, shown_key

__all__ = ["Selector", "SelectorKey"]

_WORDS = {str: "a string", int: "an integer", float: "a number", dict: "a mapping",
          list: "a list"}
_SCHEMA = {str: "string", int: "integer", float: "number", dict: "object", list: "array"}
#: The most keys a selector mapping may have.
MAX_KEYS = 64
#: The schema of one value of a map of labels.
LABEL_VALUE = {"type": ["string", "integer"]}


@dataclass(frozen=True)
class SelectorKey:
    """One key of a selector and the JSON types its value may have (``list``: several of
    the scalar types, any one of which matches). A mapping value is either a selector of
    its own (``nested``: a process's ``parent``, a node's ``gpu``) or a map of free keys
    to strings (``labels``: node labels, an environment)."""

    name: str
    types: tuple[type, ...]
    doc: str = ""
    nested: "Selector | None" = None
    labels: bool = False

    def check(self, value: Any, path: str, *, skip_unresolved: bool = False) -> None:
        if not self._fits(value):
            words = " or ".join(_WORDS[t] for t in self.types)
            raise InvalidInput(f"must be {words}, got {shown(value)}", path=path)
        if self.nested is not None and isinstance(value, Mapping):
            self.nested.check(value, path, skip_unresolved=skip_unresolved)
        elif self.labels and isinstance(value, Mapping):
            _check_labels(value, path, skip_unresolved=skip_unresolved)

    def _fits(self, value: Any) -> bool:
        for expected in self.types:
            if expected is float and isinstance(value, int | float) and \
                    not isinstance(value, bool):
                return True
            if expected is int and isinstance(value, int) and not isinstance(value, bool):
                return True
            if expected is list and isinstance(value, list):
                return True
            if expected in (str, dict) and isinstance(value, expected):
                return True
        return False

    def to_json(self) -> dict[str, Any]:
        if self.nested is not None:
            return {**self.nested.to_json(), "description": self.doc}
        names = [_SCHEMA[t] for t in self.types]
        schema: dict[str, Any] = {"type": names[0] if len(names) == 1 else names,
                                  "description": self.doc}
        if self.labels:
            schema["additionalProperties"] = dict(LABEL_VALUE)
        return schema


def _check_labels(value: Mapping[Any, Any], path: str, *, skip_unresolved: bool) -> None:
    """A map of names to strings (node labels, environment values; an integer is taken
    as its digits), at most :data:`MAX_KEYS` of them."""
    if len(value) > MAX_KEYS:
        raise InvalidInput(f"has {len(value)} keys; at most {MAX_KEYS}", path=path)
    for name, inner in value.items():
        if not isinstance(name, str):
            raise InvalidInput(f"a name is a string, got {shown(name)}", path=path)
        if isinstance(inner, str) or (isinstance(inner, int) and not isinstance(inner, bool)):
            continue
        raise InvalidInput(f"must be a string (or an integer), got {shown(inner)}",
                           path=f"{path}.{shown_key(name)}")


@dataclass(frozen=True)
class Selector:
    """A kind's target argument: ``argument`` names it in the activity; a mapping of
    ``keys`` (unless not ``mapping_form``), or (``name_form``) a bare name; ``None`` (an
    empty selector) when ``nullable``."""

    argument: str
    doc: str
    keys: tuple[SelectorKey, ...] = ()
    name_form: bool = False
    mapping_form: bool = True
    nullable: bool = True

    @property
    def key_names(self) -> tuple[str, ...]:
        return tuple(key.name for key in self.keys)

    def check(self, value: Any, path: str, *, skip_unresolved: bool = False) -> None:
        """:class:`InvalidInput` (with the key path) for a selector this kind cannot use.
        With ``skip_unresolved`` a ``${...}`` string is left for the run to substitute."""
        if skip_unresolved and isinstance(value, str) and "${" in value:
            return
        if value is None:
            if self.nullable:
                return
            raise InvalidInput("is required (a selector)", path=path)
        if self.name_form and isinstance(value, str):
            return
        if not self.mapping_form or not isinstance(value, Mapping):
            form = ("a name" if not self.mapping_form else
                    "a name or a mapping" if self.name_form else "a mapping")
            keys = f" ({', '.join(self.key_names)})" if self.mapping_form else ""
            raise InvalidInput(f"must be {form}{keys}, got {shown(value)}", path=path)
        if len(value) > MAX_KEYS:
            raise InvalidInput(f"has {len(value)} keys; a selector has at most "
                               f"{len(self.keys)}", path=path)
        by_name = {key.name: key for key in self.keys}
        for name, inner in value.items():
            key = by_name.get(name) if isinstance(name, str) else None
            if key is None:
                raise InvalidInput(f"unknown key (known: "
                                   f"{', '.join(self.key_names) or 'none'})",
                                   path=f"{path}.{shown_key(str(name))}")
            if not (skip_unresolved and isinstance(inner, str) and "${" in inner):
                key.check(inner, f"{path}.{name}", skip_unresolved=skip_unresolved)

    def typed_keys(self) -> dict[str, type]:
        """The keys whose value is one number type (``int`` or ``float``), dotted where
        nested (``parent.pid``): a ``"${var}"`` there gets that type before anything runs
        (:mod:`gameday.experiment.variables`), so ``process: {pid: "${replica_pid}"}``
        with ``--var replica_pid=26928`` is the pid 26928."""
        found: dict[str, type] = {}
        for key in self.keys:
            if key.nested is not None:
                found.update({f"{key.name}.{inner}": kind
                              for inner, kind in key.nested.typed_keys().items()})
            elif key.types in ((int,), (float,)):
                found[key.name] = key.types[0]
        return found

    def to_json(self) -> dict[str, Any]:
        """The selector as a JSON Schema (an object with ``additionalProperties: false``;
        also a string with ``name_form``, also null when ``nullable``)."""
        mapping = {"type": "object", "properties": {k.name: k.to_json() for k in self.keys},
                   "additionalProperties": False}
        forms: list[dict[str, Any]] = [mapping] if self.mapping_form else []
        if self.name_form:
            forms.append({"type": "string"})
        if self.nullable:
            forms.append({"type": "null"})
        schema: dict[str, Any] = {"description": self.doc}
        if len(forms) == 1:
            schema.update(forms[0])
        else:
            schema["anyOf"] = forms
        return schema
