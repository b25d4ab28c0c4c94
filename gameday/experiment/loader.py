"""Loading and validating experiments, with errors that name file, key path and line.

The YAML is composed once into nodes so every key path maps to its line; the
structure is checked here with precise paths, then the toolkit's own validation runs,
then every fault action's arguments are checked against the fault catalogue. An
argument that is one ``"${key}"`` with a known value (the experiment's configuration,
``--var``) is converted to its parameter's declared type first
(:mod:`gameday.experiment.variables`). Nothing here injects anything.
"""

import importlib
import inspect
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from faults.catalogue import by_activity
from gameday.bounded import MAX_YAML_BYTES, BoundedLoader, TooLarge, read_limited
from gameday.errors import InvalidInput
from gameday.experiment.extension import Extension, parse_extension
from gameday.experiment.variables import annotated_types, configuration_values, type_arguments

MAX_BYTES = MAX_YAML_BYTES


@dataclass
class LoadedExperiment:
    path: Path
    experiment: dict[str, Any]
    lines: dict[str, int]
    extension: Extension

    def line_of(self, key_path: str) -> int | None:
        """The line of a key path, or of its nearest ancestor that has one."""
        probe = key_path
        while probe:
            if probe in self.lines:
                return self.lines[probe]
            cut = max(probe.rfind("."), probe.rfind("["))
            probe = probe[:cut] if cut > 0 else ""
        return None


def _join(base: str, key: Any) -> str:
    if isinstance(key, int):
        return f"{base}[{key}]"
    return f"{base}.{key}" if base else str(key)


def _line_map(node: yaml.Node, base: str, lines: dict[str, int], depth: int) -> None:
    """Record the line of every key path under ``node`` (its depth is bounded by the
    loader, :data:`gameday.bounded.MAX_DEPTH`)."""
    lines[base] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            key = _join(base, key_node.value)
            lines[key] = key_node.start_mark.line + 1
            _line_map(value_node, key, lines, depth + 1)
            lines[key] = key_node.start_mark.line + 1
    elif isinstance(node, yaml.SequenceNode):
        for position, item in enumerate(node.value):
            _line_map(item, _join(base, position), lines, depth + 1)


def read_document(path: Path) -> tuple[dict[str, Any], dict[str, int]]:
    """Parse a YAML or JSON file into a mapping plus a key-path → line map, within the
    limits of :mod:`gameday.bounded` (size, nesting, values with aliases expanded)."""
    where = str(path)
    raw = read_limited(path, MAX_BYTES, "a YAML or JSON document")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidInput(f"not UTF-8 (byte {exc.start})", file=where) from None
    loader: BoundedLoader | None = None
    try:
        loader = BoundedLoader(text)
        node = loader.get_single_node()
        lines: dict[str, int] = {}
        if node is not None:
            _line_map(node, "", lines, 0)
        document = loader.construct_document(node) if node is not None else None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        line = mark.line + 1 if mark else None
        raise InvalidInput(f"not valid YAML/JSON: {exc.problem}", file=where, line=line) from None
    except TooLarge as exc:
        mark = exc.problem_mark
        raise InvalidInput(f"too large: {exc.problem}", file=where,
                           line=mark.line + 1 if mark else None) from None
    except (yaml.YAMLError, RecursionError, ValueError) as exc:  # ValueError: int digits
        first = (str(exc).splitlines() or [type(exc).__name__])[0][:200]
        raise InvalidInput(f"not valid YAML/JSON: {first}", file=where) from None
    finally:
        if loader is not None:
            loader.dispose()
    if not isinstance(document, dict):
        raise InvalidInput("must be a mapping (an experiment object)", file=where, line=1)
    try:
        json.dumps(document)
    except (TypeError, ValueError):
        raise InvalidInput("holds values that are not plain JSON (dates, binary)",
                           file=where) from None
    return document, lines


def load_experiment(path: Path, variables: Mapping[str, str] | None = None
                    ) -> LoadedExperiment:
    """Read and validate an experiment (with ``variables``, the ``--var`` values); every
    error is one line with file, path and line."""
    document, lines = read_document(path)
    loaded = LoadedExperiment(path=path, experiment=document, lines=lines,
                              extension=Extension())
    try:
        _check_structure(document)
        loaded.extension = parse_extension(document)
        type_arguments(_activities(document),
                       configuration_values(document.get("configuration") or {},
                                            variables or {}),
                       _declared_types)
        _check_activities(document)
        _toolkit_validation(document)
    except InvalidInput as exc:
        raise InvalidInput(_bare(exc), file=str(path), path=exc.path,
                           line=exc.line or (loaded.line_of(exc.path) if exc.path else None)
                           ) from None
    return loaded


def _bare(exc: InvalidInput) -> str:
    text = str(exc)
    prefix = f"{exc.path}: " if exc.path else ""
    return text[len(prefix):] if prefix and text.startswith(prefix) else text


def _require(mapping: Mapping[str, Any], key: str, kind: type, base: str,
             *, required: bool = True) -> Any:
    value = mapping.get(key)
    if value is None:
        if required:
            raise InvalidInput("is required", path=_join(base, key))
        return None
    if not isinstance(value, kind) or (kind is str and not value):
        names: dict[type, str] = {str: "a non-empty string", list: "a list", dict: "a mapping"}
        raise InvalidInput(f"must be {names.get(kind, kind.__name__)}", path=_join(base, key))
    return value


def _check_structure(document: Mapping[str, Any]) -> None:
    _require(document, "title", str, "")
    _require(document, "description", str, "")
    tags = _require(document, "tags", list, "", required=False) or []
    for position, tag in enumerate(tags):
        if not isinstance(tag, str) or not tag:
            raise InvalidInput("must be a non-empty string", path=f"tags[{position}]")
    for key in ("configuration", "secrets"):
        _require(document, key, dict, "", required=False)
    hypothesis = _require(document, "steady-state-hypothesis", dict, "", required=False)
    if hypothesis is not None:
        _require(hypothesis, "title", str, "steady-state-hypothesis")
        probes = _require(hypothesis, "probes", list, "steady-state-hypothesis",
                          required=False) or []
        for position, probe in enumerate(probes):
            where = f"steady-state-hypothesis.probes[{position}]"
            _check_activity(probe, where)
            if isinstance(probe, dict) and "ref" not in probe and "tolerance" not in probe:
                raise InvalidInput("a steady-state probe needs a tolerance",
                                   path=f"{where}.tolerance")
    if "method" not in document:
        raise InvalidInput("is required (it may be an empty list)", path="method")
    _require(document, "method", list, "", required=False)
    for section in ("method", "rollbacks"):
        for position, activity in enumerate(document.get(section) or []):
            _check_activity(activity, f"{section}[{position}]")


def _check_activity(activity: Any, where: str) -> None:
    if not isinstance(activity, dict):
        raise InvalidInput("must be a mapping (an activity)", path=where)
    if "ref" in activity:
        return
    kind = _require(activity, "type", str, where)
    if kind not in ("action", "probe"):
        raise InvalidInput(f"must be action or probe, got {kind!r}", path=f"{where}.type")
    _require(activity, "name", str, where)
    provider = _require(activity, "provider", dict, where)
    ptype = _require(provider, "type", str, f"{where}.provider")
    if ptype not in ("python", "http", "process"):
        raise InvalidInput(f"must be python, http or process, got {ptype!r}",
                           path=f"{where}.provider.type")
    timeout = activity.get("timeout")
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, int | float)
                                or timeout <= 0):
        raise InvalidInput(f"must be a positive number of seconds, got {timeout!r}",
                           path=f"{where}.timeout")
    if ptype == "python":
        _require(provider, "module", str, f"{where}.provider")
        _require(provider, "func", str, f"{where}.provider")
        _require(provider, "arguments", dict, f"{where}.provider", required=False)


def _activities(document: Mapping[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    found: list[tuple[str, dict[str, Any]]] = []
    hypothesis = document.get("steady-state-hypothesis") or {}
    for position, probe in enumerate(hypothesis.get("probes") or []):
        found.append((f"steady-state-hypothesis.probes[{position}]", probe))
    for section in ("method", "rollbacks"):
        for position, activity in enumerate(document.get(section) or []):
            found.append((f"{section}[{position}]", activity))
    return [(where, a) for where, a in found if "ref" not in a]


def _declared_types(module_name: str, func_name: str) -> dict[str, type]:
    """The ``int``/``float``/``bool`` parameters of an activity: the fault catalogue's
    parameter types, else the function's annotations ({} if it does not import)."""
    try:
        func = getattr(importlib.import_module(module_name), func_name, None)
    except ImportError:
        return {}
    found = annotated_types(func) if callable(func) else {}
    kind = by_activity(module_name, func_name)
    for param in kind.params if kind is not None else ():
        if param.type in (int, float, bool):
            found[param.name] = param.type
    return found


def _check_activities(document: Mapping[str, Any]) -> None:
    """Python providers must import, take the given arguments, and (faults) be in range."""
    for where, activity in _activities(document):
        provider = activity["provider"]
        if provider["type"] != "python":
            continue
        module_name, func_name = provider["module"], provider["func"]
        arguments = provider.get("arguments") or {}
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise InvalidInput(f"cannot import module {module_name!r}: {exc}",
                               path=f"{where}.provider.module") from None
        func = getattr(module, func_name, None)
        if not callable(func):
            raise InvalidInput(f"module {module_name} has no function {func_name!r}",
                               path=f"{where}.provider.func")
        parameters = inspect.signature(func).parameters
        takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
        accepted = [p for p in parameters if p not in ("configuration", "secrets")]
        for name in arguments:
            if name not in parameters and not takes_any:
                raise InvalidInput(
                    f"{module_name}.{func_name} takes no argument {name!r} "
                    f"(it takes: {', '.join(accepted)})",
                    path=f"{where}.provider.arguments.{name}")
        kind = by_activity(module_name, func_name)
        if kind is not None:
            kind.validate(arguments, base=f"{where}.provider.arguments", skip_unresolved=True)


def _toolkit_validation(document: dict[str, Any]) -> None:
    from chaoslib.exceptions import ChaosException
    from chaoslib.experiment import ensure_experiment_is_valid

    try:
        ensure_experiment_is_valid(json.loads(json.dumps(document)))
    except ChaosException as exc:
        raise InvalidInput(f"invalid experiment: {exc}") from None
    except (AttributeError, TypeError, KeyError, ValueError) as exc:  # the toolkit tripped
        raise InvalidInput(f"invalid experiment (the toolkit's validation failed on it: "
                           f"{type(exc).__name__}: {exc})") from None
