"""The fault seams: the backend Protocol and typed, self-validating parameters.

A fault kind (``gpu.ecc``) is a small typed object: its parameters with types, ranges
and defaults, the layer it is injected at, the coverage layer it lands on, and the
activity that injects it. The same parameter specs validate an experiment before
anything runs (``gameday validate``) and again at injection time.
"""

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gameday.contract.backend import INJECTION_LAYERS, Backend, FaultRequest
from gameday.errors import InvalidInput

__all__ = ["INJECTION_LAYERS", "Backend", "FaultKind", "FaultRequest", "Param"]

_TYPE_NAMES = {int: "an integer", float: "a number", bool: "a boolean", str: "a string",
               dict: "a mapping"}
_SCHEMA_TYPES = {int: "integer", float: "number", bool: "boolean", str: "string",
                 dict: "object"}


@dataclass(frozen=True)
class Param:
    """One parameter of a fault kind."""

    name: str
    type: type
    doc: str
    default: Any = None
    required: bool = False
    choices: tuple[Any, ...] | None = None
    minimum: float | None = None
    maximum: float | None = None
    nullable: bool = False

    def check(self, value: Any, path: str) -> Any:
        """Return the value, coerced where harmless (int for float), or raise InvalidInput."""
        if value is None:
            if self.nullable or not self.required:
                return None if self.nullable else self.default
            raise InvalidInput("is required", path=path)
        expected = self.type
        if expected is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if (isinstance(value, bool) and expected is not bool) or not isinstance(value, expected):
            raise InvalidInput(f"must be {_TYPE_NAMES.get(expected, expected.__name__)}, "
                               f"got {value!r}", path=path)
        if self.choices is not None and value not in self.choices:
            shown = ", ".join(str(c) for c in self.choices)
            raise InvalidInput(f"must be one of {shown}, got {value!r}", path=path)
        return self._check_range(value, path)

    def _check_range(self, value: Any, path: str) -> Any:
        if self.minimum is not None and value < self.minimum:
            raise InvalidInput(f"must be >= {self.minimum}, got {value!r}", path=path)
        if self.maximum is not None and value > self.maximum:
            raise InvalidInput(f"must be <= {self.maximum}, got {value!r}", path=path)
        return value

    @property
    def type_name(self) -> str:
        """The type in words: ``an integer``, ``a number``, ..."""
        return _TYPE_NAMES.get(self.type, self.type.__name__)

    def to_json(self) -> dict[str, Any]:
        """The parameter as a JSON Schema property (``type``, ``description``, ``default``,
        ``enum``, ``minimum``, ``maximum``; a nullable one's type also allows ``null``)."""
        kind: Any = _SCHEMA_TYPES.get(self.type, "string")
        schema: dict[str, Any] = {"type": [kind, "null"] if self.nullable else kind,
                                  "description": self.doc}
        if self.default is not None:
            schema["default"] = self.default
        if self.choices:
            schema["enum"] = list(self.choices)
        if self.minimum is not None:
            schema["minimum"] = self.minimum
        if self.maximum is not None:
            schema["maximum"] = self.maximum
        return schema


@dataclass(frozen=True)
class FaultKind:
    """A catalogue entry: what a fault is, how it is injected, and how it is seen."""

    name: str
    summary: str
    module: str
    func: str
    coverage_layer: str
    injected_at: Mapping[str, str]
    params: tuple[Param, ...]
    seen_through: str
    selector: str | None = None
    tags: tuple[str, ...] = field(default_factory=tuple)
    #: what an audit table calls it ("CPU saturation", "Inference API timeout")
    family: str = ""
    #: coverage layers the kind can act on besides ``coverage_layer``
    also_layers: tuple[str, ...] = ()
    #: what a real host (``--target host``/``kubernetes``) sees of it, where that differs
    #: from the lab: who notices, who does not, what is refused there
    host_sees: str = ""

    @property
    def coverage_layers(self) -> tuple[str, ...]:
        """Every coverage layer a scenario of this kind can be filed under."""
        return (self.coverage_layer, *self.also_layers)

    def validate(self, arguments: Mapping[str, Any], *, base: str = "arguments",
                 skip_unresolved: bool = False) -> dict[str, Any]:
        """Check every argument; return them with defaults filled in.

        With ``skip_unresolved`` a ``${...}`` string is left for the run to substitute.
        """
        known = {p.name for p in self.params} | ({self.selector} if self.selector else set())
        known |= {"lease_s"}
        for key in arguments:
            if key not in known:
                raise InvalidInput(f"unknown argument of {self.name} "
                                   f"(known: {', '.join(sorted(known))})", path=f"{base}.{key}")
        checked: dict[str, Any] = {}
        for param in self.params:
            value = arguments.get(param.name)
            if skip_unresolved and isinstance(value, str) and "${" in value:
                checked[param.name] = value
                continue
            checked[param.name] = param.check(value, f"{base}.{param.name}")
        return checked

    def params_schema(self) -> dict[str, Any]:
        """The arguments an experiment may give this kind, as a JSON Schema object (the
        selector argument, when the kind has one, is an object of selector keys)."""
        properties = {p.name: p.to_json() for p in self.params}
        if self.selector:
            properties[self.selector] = {"type": "object",
                                         "description": "which target (a selector)"}
        properties["lease_s"] = {"type": "number", "minimum": 0,
                                 "description": "the fault's lease, seconds"}
        return {"type": "object", "properties": properties,
                "required": [p.name for p in self.params if p.required],
                "additionalProperties": False}

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.name, "summary": self.summary,
                "activity": f"{self.module}.{self.func}",
                "coverage_layer": self.coverage_layer,
                "coverage_layers": list(self.coverage_layers), "family": self.family,
                "injected_at": dict(self.injected_at),
                "selector": self.selector, "params": self.params_schema(),
                "seen_through": self.seen_through, "tags": list(self.tags),
                "host_sees": self.host_sees}
