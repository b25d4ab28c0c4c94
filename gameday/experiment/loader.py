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
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from chaoslib import substitute

from gameday.bounded import MAX_YAML_BYTES, BoundedLoader, TooLarge, read_limited
from gameday.errors import InputErrors, InvalidInput, checked, first_line
from gameday.experiment.extension import Extension, parse_extension
from gameday.experiment.keys import did_you_mean, unknown_key, unknown_keys
from gameday.experiment.variables import annotated_types, configuration_values, type_arguments
from gameday.kinds import KindParams, KindSpec, by_activity

MAX_BYTES = MAX_YAML_BYTES

#: What each target offers experiments as ``${...}`` configuration without being told
#: (host and Kubernetes targets take theirs from the configuration).
OFFERED_VARIABLES: dict[str, tuple[str, ...]] = {
    "lab": ("service_url", "prometheus_url", "placement_url"),
}
_VARIABLE = re.compile(r"\$\{([^}]*)\}")


@dataclass
class LoadedExperiment:
    path: Path
    experiment: dict[str, Any]
    lines: dict[str, int]
    extension: Extension

    def line_of(self, key_path: str) -> int | None:
        """The line of a key path, or of its nearest ancestor that has one."""
        return line_of(self.lines, key_path)


def line_of(lines: Mapping[str, int], key_path: str) -> int | None:
    """The line ``lines`` maps ``key_path`` to, or its nearest ancestor's."""
    probe = key_path
    while probe:
        if probe in lines:
            return lines[probe]
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
        raise InvalidInput(f"not valid YAML/JSON: {first_line(exc)[:200]}",
                           file=where) from None
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
    """Read and validate an experiment, its typed arguments converted with ``variables``
    (the ``--var`` values); every error is one line with file, path and line (the first
    of :func:`check_experiment`'s is raised)."""
    return checked(*check_experiment(path, typed=variables or {}))


def check_experiment(path: Path, *, target: str | None = None,
                     variables: Mapping[str, str] | None = None,
                     typed: Mapping[str, str] | None = None
                     ) -> tuple[LoadedExperiment | None, list[InvalidInput]]:
    """Every error of an experiment, each one line with file, line and key path, and the
    experiment (None when it cannot be read at all).

    An argument that is exactly ``"${name}"`` with a known value (configuration, or
    ``typed``/``variables``: ``--var`` values) is converted to its parameter's declared
    type, and refused when it does not convert. With ``variables`` (``--var`` values,
    possibly none) every ``${name}`` must also be defined: by the experiment's
    configuration or secrets, by ``variables``, or offered by the target (``target``, else
    the extension's: :data:`OFFERED_VARIABLES`).
    """
    try:
        document, lines = read_document(path)
    except InvalidInput as exc:
        return None, [exc]
    loaded = LoadedExperiment(path=path, experiment=document, lines=lines,
                              extension=Extension())
    collected = InputErrors()
    found = collected.found
    found.extend(unknown_keys(document))
    attempt = collected.attempt
    shaped = attempt(_check_structure, document)
    for where, activity in _all_activities(document):
        shaped = attempt(_check_activity, activity, where) and shaped
    loaded.extension = collected.value(parse_extension, document) or loaded.extension
    if shaped:
        values = configuration_values(document.get("configuration") or {},
                                      {**(typed or {}), **(variables or {})})
        attempt(type_arguments, _activities(document), values, _declared_types)
        for where, activity in _activities(document):
            attempt(_check_provider, where, activity)
        attempt(_check_coverage, document, loaded.extension)
        found.extend(_selector_errors(document))
        found.extend(_process_selector_errors(document, values))
        if variables is not None:
            kind = target or loaded.extension.target or _raw_target(document)
            found.extend(_undefined_variables(document, variables, kind))
        if not found:
            attempt(_toolkit_validation, document)
    errors: list[InvalidInput] = []
    for error in found:
        located = InvalidInput(_bare(error), file=str(path), path=error.path,
                               line=error.line or (loaded.line_of(error.path) if error.path
                                                   else None))
        if str(located) not in {str(e) for e in errors}:
            errors.append(located)
    return loaded, errors


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
        _require(hypothesis, "probes", list, "steady-state-hypothesis", required=False)
    if "method" not in document:
        raise InvalidInput("is required (it may be an empty list)", path="method")
    _require(document, "method", list, "", required=False)
    _require(document, "rollbacks", list, "", required=False)


def _all_activities(document: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """Every activity of the hypothesis, method and rollbacks, as written (any shape)."""
    found: list[tuple[str, Any]] = []
    hypothesis = document.get("steady-state-hypothesis")
    probes = hypothesis.get("probes") if isinstance(hypothesis, Mapping) else None
    for position, probe in enumerate(probes if isinstance(probes, list) else []):
        found.append((f"steady-state-hypothesis.probes[{position}]", probe))
    for section in ("method", "rollbacks"):
        items = document.get(section)
        for position, activity in enumerate(items if isinstance(items, list) else []):
            found.append((f"{section}[{position}]", activity))
    return found


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
    if where.startswith("steady-state-hypothesis") and "tolerance" not in activity:
        raise InvalidInput("a steady-state probe needs a tolerance", path=f"{where}.tolerance")


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
    parameter types and its selector's typed keys (dotted: ``process.pid``), else the
    function's annotations ({} if it does not import)."""
    try:
        func = getattr(importlib.import_module(module_name), func_name, None)
    except ImportError:
        return {}
    found = annotated_types(func) if callable(func) else {}
    kind = by_activity(module_name, func_name)
    for param in kind.params if kind is not None else ():
        if param.type in (int, float, bool):
            found[param.name] = param.type
    if kind is not None and kind.selects is not None:
        for key, declared in kind.selects.typed_keys().items():
            found[f"{kind.selects.argument}.{key}"] = declared
    return found


def _check_provider(where: str, activity: Mapping[str, Any]) -> None:
    """A Python provider must import, take the given arguments, and (faults) be in range."""
    provider = activity["provider"]
    if provider["type"] == "python":
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
                    f"{module_name}.{func_name} takes no argument {name!r}"
                    f"{did_you_mean(name, accepted)} (it takes: {', '.join(accepted)})",
                    path=f"{where}.provider.arguments.{name}")
        kind = by_activity(module_name, func_name)
        if kind is not None:  # the selector: _selector_errors
            given = {k: v for k, v in arguments.items() if k != kind.selector}
            kind.check_arguments(given, path=f"{where}.provider.arguments",
                                 skip_unresolved=True)


def _selector_errors(document: Mapping[str, Any]) -> list[InvalidInput]:
    """Selector keys a fault kind does not know (``gpu: {holdin_shard: 0}``, with a "did
    you mean"), and selector values of the wrong type (its declaration's check)."""
    found: list[InvalidInput] = []
    for where, activity in _activities(document):
        provider = activity["provider"]
        if activity.get("type") != "action" or provider["type"] != "python":
            continue
        kind = by_activity(provider["module"], provider["func"])
        selects = kind.selects if kind is not None else None
        arguments = provider.get("arguments") or {}
        if selects is None or not isinstance(arguments, Mapping):
            continue
        selector = arguments.get(selects.argument)
        path = f"{where}.provider.arguments.{selects.argument}"
        if isinstance(selector, Mapping) and selects.mapping_form:
            unknown = [key for key in selector if key not in selects.key_names]
            if unknown:
                found.extend(unknown_key(str(key), selects.key_names, f"{path}.{key}")
                             for key in unknown)
                continue
        try:
            selects.check(selector, path, skip_unresolved=True)
        except InvalidInput as exc:
            found.append(exc)
    return found


def _process_selector_errors(document: Mapping[str, Any],
                             values: Mapping[str, tuple[Any, str]]) -> list[InvalidInput]:
    """Each process fault's selector, its known ``${name}`` substituted as the run will,
    checked by the rules the action applies before it resolves it
    (:func:`gameday.experiment.process_selector.check_process_selector`): validate and
    plan agree."""
    found: list[InvalidInput] = []
    known = {key: value for key, (value, _) in values.items()}
    for where, activity in _activities(document):
        provider = activity["provider"]
        kind = by_activity(str(provider.get("module")), str(provider.get("func")))
        if activity.get("type") != "action" or kind is None or kind.selector != "process":
            continue
        selector = (provider.get("arguments") or {}).get("process")
        if selector is None:
            continue  # (a missing argument is the provider check's to report)
        from gameday.experiment.process_selector import check_process_selector

        try:
            check_process_selector(substitute(selector, known, {}))
        except InvalidInput as exc:
            found.append(InvalidInput(_bare(exc), path=f"{where}.provider.arguments."
                                                       f"{exc.path or 'process'}"))
    return found


def _raw_target(document: Mapping[str, Any]) -> str | None:
    """The gameday extension's ``target`` as written (when the extension did not parse)."""
    for raw in document.get("extensions") or []:
        if isinstance(raw, Mapping) and raw.get("name") == "gameday":
            target = raw.get("target")
            return target if isinstance(target, str) else None
    return None


def _strings(value: Any, path: str) -> list[tuple[str, str]]:
    if isinstance(value, str):
        return [(path, value)]
    if isinstance(value, Mapping):
        return [item for key, inner in value.items() for item in _strings(inner, _join(path, key))]
    if isinstance(value, list):
        return [item for n, inner in enumerate(value) for item in _strings(inner, _join(path, n))]
    return []


def _undefined_variables(document: Mapping[str, Any], variables: Mapping[str, str],
                         target: str | None) -> list[InvalidInput]:
    """Every ``${name}`` that nothing defines (see :func:`check_experiment`)."""
    defined = set(document.get("configuration") or {}) | set(variables)
    defined |= set(OFFERED_VARIABLES.get(target or "", ()))
    secrets = document.get("secrets") or {}
    for scope in secrets.values() if isinstance(secrets, Mapping) else ():
        defined |= set(scope) if isinstance(scope, Mapping) else set()
    found: list[InvalidInput] = []
    for key in document:
        if key in ("configuration", "secrets"):
            continue
        for path, text in _strings(document[key], str(key)):
            for name in _VARIABLE.findall(text):
                if name not in defined:
                    offered = f"target {target} offers " + ", ".join(
                        OFFERED_VARIABLES[target]) if target in OFFERED_VARIABLES else \
                        f"target {target or 'none'} offers none"
                    found.append(InvalidInput(
                        f"${{{name}}} is not defined{did_you_mean(name, sorted(defined))}: set "
                        f"it in configuration or with --var {name}=VALUE ({offered})",
                        path=path))
    return found


def _check_coverage(document: Mapping[str, Any], extension: Extension) -> None:
    """The coverage cell must be one the method's faults can produce.

    Experiments whose method injects no catalogue kind (custom fault actions) are not
    checked: their kinds are not known before the run.
    """
    fault, layer = extension.coverage.get("fault"), extension.coverage.get("layer")
    position = next((n for n, raw in enumerate(document.get("extensions") or [])
                     if isinstance(raw, Mapping) and raw.get("name") == "gameday"), 0)
    where = f"extensions[{position}].coverage"
    injected: list[KindSpec[KindParams]] = []
    for _, activity in _activities(document):
        provider = activity["provider"]
        if activity.get("type") == "action" and provider["type"] == "python":
            kind = by_activity(provider["module"], provider["func"])
            if kind is not None and kind not in injected:
                injected.append(kind)
    if not injected:
        return
    names = [kind.name for kind in injected]
    if fault is not None and fault not in names:
        raise InvalidInput(f"{fault} is never injected by this experiment's actions (they "
                           f"inject: {', '.join(names)}); its runs would be filed under the "
                           "wrong coverage cell", path=f"{where}.fault")
    kinds = [k for k in injected if k.name == fault] if fault else injected[:1]
    if layer is not None and kinds and layer not in kinds[0].coverage_layers:
        raise InvalidInput(f"{kinds[0].name} cannot act at the {layer} layer (its layers: "
                           f"{', '.join(kinds[0].coverage_layers)})", path=f"{where}.layer")


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
