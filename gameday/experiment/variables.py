"""Typed variables: an argument given as ``"${key}"`` gets the type its parameter declares.

``--var KEY=VALUE`` gives strings, and so may an experiment's ``configuration``; the
toolkit substitutes ``"${port}"`` by the value as it is, so a function that wants an
integer would get ``"8080"`` and fail mid-run. :func:`type_arguments` converts, before
anything runs, every python activity argument that is exactly one ``"${key}"`` with a
known value, by its parameter's declared type (the fault catalogue's parameter type, or
the function's annotation: ``int``, ``float`` or ``bool``, optional or not), nested keys
too (a selector's ``process.pid``: the catalogue's typed selector keys), and
refuses a value that does not convert with one line naming the key and where it came
from (:class:`gameday.errors.InvalidInput`, exit 2).
"""

import inspect
import os
import re
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, Final

from gameday.errors import InvalidInput

__all__ = ["annotated_types", "configuration_values", "convert", "type_arguments"]

_WHOLE: Final = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_.-]*)\}")
_TRUE: Final = frozenset({"true", "yes", "on", "1"})
_FALSE: Final = frozenset({"false", "no", "off", "0"})
_NAMES: Final = {int: "an integer", float: "a number", bool: "a boolean (true/false)"}


def configuration_values(configuration: Mapping[str, Any], variables: Mapping[str, str],
                         environ: Mapping[str, str] | None = None
                         ) -> dict[str, tuple[Any, str]]:
    """Each known configuration value with where it came from: the experiment's literal
    values and ``{type: env, key}`` entries (as the toolkit reads them), then ``--var``."""
    env = os.environ if environ is None else environ
    known: dict[str, tuple[Any, str]] = {}
    for key, value in configuration.items():
        if isinstance(value, Mapping):
            if value.get("type") == "env" and isinstance(value.get("key"), str):
                name = value["key"]
                if name in env:
                    known[key] = (env[name], f"configuration.{key} (environment ${name})")
                elif "default" in value:
                    known[key] = (value["default"], f"configuration.{key} (default)")
            continue
        known[key] = (value, f"configuration.{key}")
    for key, value in variables.items():
        known[key] = (value, f"--var {key}")
    return known


def convert(value: Any, declared: type) -> Any:
    """``value`` as ``declared`` (``int``, ``float`` or ``bool``); :class:`ValueError` if
    it is not one (a boolean is never taken for a number, nor 1.5 for an integer)."""
    if declared is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
            return value.strip().lower() in _TRUE
        raise ValueError(value)
    if isinstance(value, bool):
        raise ValueError(value)
    if declared is int:
        if isinstance(value, int):
            return value
        if isinstance(value, str):
            return int(value.strip())
        raise ValueError(value)
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        return float(value.strip())
    raise ValueError(value)


def type_arguments(activities: list[tuple[str, dict[str, Any]]],
                   known: Mapping[str, tuple[Any, str]],
                   declared_types: Callable[[str, str], Mapping[str, type]]) -> None:
    """Replace, in place, each python argument ``"${key}"`` (at any depth of nested
    mappings) whose parameter is declared ``int``/``float``/``bool``
    (``declared_types(module, func)``, by dotted path: ``pid`` or ``process.pid``) and
    whose ``key`` is ``known``, by the converted value; :class:`InvalidInput` (path of
    the argument) for one that does not convert."""
    for where, activity in activities:
        provider = activity.get("provider") or {}
        arguments = provider.get("arguments")
        if provider.get("type") != "python" or not isinstance(arguments, dict):
            continue
        wanted = declared_types(str(provider.get("module")), str(provider.get("func")))
        for name, holder, key in _slots(arguments, ""):
            value = holder[key]
            match = _WHOLE.fullmatch(value) if isinstance(value, str) else None
            declared = wanted.get(name)
            if match is None or declared is None or match.group(1) not in known:
                continue
            raw, source = known[match.group(1)]
            try:
                holder[key] = convert(raw, declared)
            except (ValueError, TypeError):
                raise InvalidInput(
                    f"{source} is {raw!r}, not {_NAMES[declared]} as argument {name!r} of "
                    f"{provider.get('module')}.{provider.get('func')} needs",
                    path=f"{where}.provider.arguments.{name}") from None


def _slots(mapping: dict[str, Any], prefix: str) -> list[tuple[str, dict[str, Any], str]]:
    """``(dotted path, holder, key)`` of every value in nested mappings."""
    found: list[tuple[str, dict[str, Any], str]] = []
    for key, value in mapping.items():
        path = f"{prefix}{key}"
        found.append((path, mapping, key))
        if isinstance(value, dict):
            found.extend(_slots(value, f"{path}."))
    return found


def annotated_types(func: Callable[..., Any]) -> dict[str, type]:
    """The parameters of ``func`` annotated ``int``, ``float`` or ``bool`` (or one of
    them or ``None``), by name."""
    try:
        hints = typing.get_type_hints(func)
    except Exception:  # an annotation that does not resolve: no types known
        return {}
    found: dict[str, type] = {}
    for name in inspect.signature(func).parameters:
        hint = hints.get(name)
        if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
            options = [a for a in typing.get_args(hint) if a is not type(None)]
            hint = options[0] if len(options) == 1 else None
        if hint in (int, float, bool):
            found[name] = hint
    return found
