"""A fault kind, declared once: what it is, how it is injected and seen, its typed
parameters and the selector it accepts.

A :class:`KindSpec` is the single declaration every side reads: the fault activity and
``gameday validate``/``plan`` on the orchestrator, the agent's registry on every request,
the lab's and the host's backends (:meth:`KindSpec.parse` gives them the typed,
frozen parameters), and the catalogue (``gameday faults``, docs/faults.md).

:meth:`KindSpec.parse` refuses an unknown key, a wrong type, a value out of bounds and a
broken cross-parameter rule (:meth:`KindParams.check`) with the key path, names every
problem it found (the first in full), and raises nothing but
:class:`gameday.errors.InvalidInput`: it never walks a refused value, and a mapping of
more than :data:`MAX_KEYS` keys is refused by its size.
"""

import dataclasses
import difflib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, TypeVar

from gameday.errors import FaultRejected, InvalidInput
from gameday.kinds.params import Param, params_of, shown, shown_key
from gameday.kinds.selectors import Selector

__all__ = ["MAX_KEYS", "KindParams", "KindSpec"]

#: The most keys a parameter mapping may have (more is refused by its size alone).
MAX_KEYS = 64
#: How many problems an error names beyond the first.
_NAMED_PROBLEMS = 4

P = TypeVar("P", bound="KindParams", covariant=True)


@dataclass(frozen=True, kw_only=True)
class KindParams:
    """The typed parameters of one fault kind: subclasses are frozen, keyword-only
    dataclasses whose fields are declared with :func:`gameday.kinds.params.param` or
    :func:`~gameday.kinds.params.required`."""

    #: the argument words of the rules :meth:`check` enforces, for docs
    rules: ClassVar[str] = ""

    def check(self, path: str) -> None:
        """Rules across parameters (``exactly one of size_bytes or fraction``):
        :class:`InvalidInput` naming ``path``; nothing by default."""

    def to_json(self) -> dict[str, Any]:
        """The parameters as plain JSON (what the agent's wire and the ledger carry)."""
        out: dict[str, Any] = {}
        for spec in dataclasses.fields(self):
            value = getattr(self, spec.name)
            out[spec.name] = list(value) if isinstance(value, tuple) else value
        return out


def _unresolved(value: object) -> bool:
    return isinstance(value, str) and "${" in value


@dataclass(frozen=True)
class KindSpec(Generic[P]):
    """One fault kind (``gpu.ecc``): its words, layers, activity, parameters, selector."""

    name: str
    summary: str
    #: the activity that injects it (``faults.gpu.ecc_error``)
    module: str
    func: str
    coverage_layer: str
    #: the injection layer per backend (``{"lab": "virtual", "host": "telemetry"}``)
    injected_at: Mapping[str, str]
    params_type: type[P]
    seen_through: str
    selects: Selector | None = None
    tags: tuple[str, ...] = ()
    #: what an audit table calls it ("CPU saturation", "Inference API timeout")
    family: str = ""
    #: coverage layers the kind can act on besides ``coverage_layer``
    also_layers: tuple[str, ...] = ()
    #: what a real host (``--target host``/``kubernetes``) sees of it, where that differs
    #: from the lab: who notices, who does not, what is refused there
    host_sees: str = ""
    params: tuple[Param, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "params", params_of(self.params_type))

    @property
    def selector(self) -> str | None:
        """The activity's selector argument (``gpu``, ``link``, ...), if the kind has one."""
        return self.selects.argument if self.selects is not None else None

    @property
    def coverage_layers(self) -> tuple[str, ...]:
        """Every coverage layer a scenario of this kind can be filed under."""
        return (self.coverage_layer, *self.also_layers)

    def parse(self, values: object, *, path: str = "params") -> P:
        """The typed parameters of ``values`` (defaults filled in), or
        :class:`InvalidInput` naming the key path of every problem."""
        checked = self._checked(values, path, skip_unresolved=False)
        try:
            parsed = self.params_type(**checked)
        except TypeError as exc:  # a declaration the dataclass itself refuses
            raise InvalidInput(f"{self.name}: {exc}", path=path) from None
        parsed.check(path)
        return parsed

    def backend_params(self, params: object) -> P:
        """The parameters of a request as a backend reads them: :meth:`parse`, with a
        refusal raised as :class:`FaultRejected` (the backend seam's error), naming the
        kind and the key path. The agent has parsed them already; a backend called
        directly (a test, the lab) is held to the same declaration."""
        try:
            return self.parse(params)
        except InvalidInput as exc:
            raise FaultRejected(f"{self.name}: {exc}") from None

    def check_arguments(self, arguments: object, *, path: str = "arguments",
                        skip_unresolved: bool = False) -> None:
        """Check an activity's arguments as an experiment gives them: the parameters,
        the selector argument and ``lease_s``. With ``skip_unresolved`` a ``${...}``
        string is left for the run to substitute (and the cross-parameter rules wait
        for the run)."""
        if not isinstance(arguments, Mapping):
            raise InvalidInput(f"must be a mapping, got {shown(arguments)}", path=path)
        values = dict(arguments)
        if self.selects is not None and self.selects.argument in values:
            selector = values.pop(self.selects.argument)
            self.selects.check(selector, f"{path}.{self.selects.argument}",
                               skip_unresolved=skip_unresolved)
        lease = values.pop("lease_s", None)
        if lease is not None and not (skip_unresolved and _unresolved(lease)) and (
                isinstance(lease, bool) or not isinstance(lease, int | float) or lease < 0):
            raise InvalidInput(f"must be a number of seconds >= 0, got {shown(lease)}",
                               path=f"{path}.lease_s")
        if skip_unresolved and any(_unresolved(v) for v in values.values()):
            self._checked(values, path, skip_unresolved=True)
        else:
            self.parse(values, path=path)

    def _checked(self, values: object, path: str, *, skip_unresolved: bool) -> dict[str, Any]:
        if not isinstance(values, Mapping):
            raise InvalidInput(f"must be a mapping, got {shown(values)}", path=path)
        if len(values) > MAX_KEYS:
            raise InvalidInput(f"has {len(values)} keys; {self.name} takes "
                               f"{len(self.params)}", path=path)
        problems: list[InvalidInput] = []
        known = {p.name for p in self.params}
        for key in values:
            if key not in known:
                problems.append(self._unknown(key, path))
        checked: dict[str, Any] = {}
        for param in self.params:
            if param.name not in values:
                if param.required:
                    problems.append(InvalidInput("is required", path=f"{path}.{param.name}"))
                continue
            value = values[param.name]
            if skip_unresolved and _unresolved(value):
                continue
            try:
                checked[param.name] = param.check(value, f"{path}.{param.name}")
            except InvalidInput as exc:
                problems.append(exc)
        if problems:
            raise _all_of(problems)
        return checked

    def _unknown(self, key: object, path: str) -> InvalidInput:
        names = [p.name for p in self.params]
        if not isinstance(key, str):
            return InvalidInput(f"a parameter name is a string, got {shown(key)}", path=path)
        close = difflib.get_close_matches(key[:100], names, n=1)
        hint = f"; did you mean {close[0]}?" if close else ""
        return InvalidInput(f"unknown parameter of {self.name} (known: "
                            f"{', '.join(names) or 'none'}){hint}",
                            path=f"{path}.{shown_key(key)}")

    def params_schema(self) -> dict[str, Any]:
        """The arguments an experiment may give this kind, as a JSON Schema object: every
        parameter, the selector argument when the kind has one, ``lease_s``; nothing
        else (``additionalProperties: false``)."""
        properties = {p.name: p.to_json() for p in self.params}
        if self.selects is not None:
            properties[self.selects.argument] = self.selects.to_json()
        properties["lease_s"] = {"type": "number", "minimum": 0,
                                 "description": "the fault's lease, seconds"}
        schema: dict[str, Any] = {"type": "object", "properties": properties,
                                  "required": [p.name for p in self.params if p.required],
                                  "additionalProperties": False}
        if self.params_type.rules:
            schema["description"] = self.params_type.rules
        return schema

    def to_json(self) -> dict[str, Any]:
        """The catalogue entry (``gameday faults --output json``)."""
        return {"kind": self.name, "summary": self.summary,
                "activity": f"{self.module}.{self.func}",
                "coverage_layer": self.coverage_layer,
                "coverage_layers": list(self.coverage_layers), "family": self.family,
                "injected_at": dict(self.injected_at),
                "selector": self.selector, "params": self.params_schema(),
                "seen_through": self.seen_through, "tags": list(self.tags),
                "host_sees": self.host_sees}


def _all_of(problems: list[InvalidInput]) -> InvalidInput:
    """One error: the first problem in full, then the paths of the next few."""
    first = problems[0]
    if len(problems) == 1:
        return first
    others = [p.path or str(p) for p in problems[1:1 + _NAMED_PROBLEMS]]
    more = len(problems) - 1 - len(others)
    tail = ", ".join(others) + (f" and {more} more" if more else "")
    message = str(first).removeprefix(f"{first.path}: ") if first.path else str(first)
    return InvalidInput(f"{message} (also: {tail})", path=first.path)
