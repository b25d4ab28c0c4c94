"""What a virtual fault kind is, and the parameter checks every kind shares.

A :class:`VirtualFault` turns a request (target, params) into a :class:`GpuChange`, or
raises :class:`gameday.errors.FaultRejected` with a one-line reason naming the
parameter. The change names the fields of a GPU's state that the fault sets, and their
values; the backend records the values they had, and reverting restores them.
"""

from collections.abc import Collection, Mapping, Sequence
from typing import Any, Protocol, TypeGuard, TypeVar

from gameday.errors import FaultRejected
from gameday.lab.gpustate import GpuState

__all__ = [
    "GpuChange",
    "GrowingChange",
    "VirtualFault",
    "bool_param",
    "check_known",
    "choice_param",
    "float_param",
    "int_param",
    "is_growing",
    "target_gpu",
]

T = TypeVar("T")


class GpuChange(Protocol):
    """A validated change to one GPU."""

    @property
    def gpu(self) -> int: ...

    def changes(self, state: GpuState) -> dict[str, Any]:
        """The fields of the GPU's ``state`` that the fault sets, with their values (so
        the backend copies the state with them, :meth:`GpuState.with_values`, and knows
        which to restore without comparing every field)."""
        ...

    def describe(self, applied: GpuState) -> dict[str, Any]:
        """Details worth recording about the applied fault (JSON-serialisable)."""
        ...


class GrowingChange(GpuChange, Protocol):
    """A change that keeps changing while applied (a leak): the backend sets the fields
    :meth:`grow` answers every ``tick_s``, and restores ``grown_fields`` on revert."""

    @property
    def tick_s(self) -> float: ...

    @property
    def grown_fields(self) -> tuple[str, ...]: ...

    def grow(self, state: GpuState, elapsed_s: float) -> dict[str, Any]:
        """The fields to set ``elapsed_s`` after the fault was applied."""
        ...


def is_growing(change: GpuChange) -> TypeGuard[GrowingChange]:
    """Whether ``change`` grows while applied (it has :meth:`GrowingChange.grow`). Not
    ``isinstance`` on a runtime-checkable protocol: that walks the protocol's members on
    every call (~0.2 ms), once per fault applied."""
    return callable(getattr(change, "grow", None))


class VirtualFault(Protocol):
    """One fault kind of the virtual backend."""

    @property
    def kind(self) -> str: ...

    @property
    def injected_at(self) -> str: ...

    def validate(self, target: Mapping[str, Any], params: Mapping[str, Any],
                 gpus: Sequence[GpuState]) -> GpuChange:
        """Check ``target`` and ``params`` against this node's ``gpus``; raise
        :class:`FaultRejected` (one line, naming the parameter) when invalid."""
        ...


def check_known(kind: str, what: str, given: Mapping[str, Any], allowed: Collection[str]) -> None:
    """Refuse a key of ``given`` that is not in ``allowed`` (the first by sort order)."""
    for key in given:  # a plain loop: a valid request makes no set, nor a generator
        if key not in allowed:
            break
    else:
        return
    unknown = min(key for key in given if key not in allowed)
    raise FaultRejected(f"{kind}: unknown {what} {unknown!r}; "
                        f"expected {', '.join(allowed) or 'none'}")


def target_gpu(kind: str, target: Mapping[str, Any], gpus: Sequence[GpuState]) -> int:
    """The GPU index of a ``{"gpu": int}`` target, which must exist and be present."""
    check_known(kind, "target field", target, ("gpu",))
    if "gpu" not in target:
        raise FaultRejected(f"{kind}: target.gpu is required (a GPU index)")
    index = target["gpu"]
    if isinstance(index, bool) or not isinstance(index, int):
        raise FaultRejected(f"{kind}: target.gpu must be an integer GPU index, got {index!r}")
    if not 0 <= index < len(gpus):
        node = gpus[0].node if gpus else "this node"
        raise FaultRejected(f"{kind}: target.gpu {index} does not exist on {node} "
                            f"(GPUs 0..{len(gpus) - 1})")
    if not gpus[index].present:
        raise FaultRejected(f"{kind}: target.gpu {index} ({gpus[index].label}) is not present")
    return index


def int_param(kind: str, params: Mapping[str, Any], name: str, *, default: int,
              low: int, high: int) -> int:
    value = params.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise FaultRejected(f"{kind}: parameter {name!r} must be an integer between {low} "
                            f"and {high}, got {value!r}")
    return value


def bool_param(kind: str, params: Mapping[str, Any], name: str, *, default: bool) -> bool:
    value = params.get(name, default)
    if not isinstance(value, bool):
        raise FaultRejected(f"{kind}: parameter {name!r} must be true or false, got {value!r}")
    return value


def choice_param(kind: str, params: Mapping[str, Any], name: str, choices: Sequence[T],
                 *, default: T | None = None, required: bool = False) -> T | None:
    if name not in params:
        if required:
            raise FaultRejected(f"{kind}: parameter {name!r} is required; one of "
                                f"{', '.join(repr(c) for c in choices)}")
        return default
    value = params[name]
    if isinstance(value, bool) or value not in choices:
        raise FaultRejected(f"{kind}: parameter {name!r} must be one of "
                            f"{', '.join(repr(c) for c in choices)}, got {value!r}")
    chosen: T = value
    return chosen


def float_param(kind: str, params: Mapping[str, Any], name: str, *, default: float,
                low: float, high: float, low_open: bool = False) -> float:
    """A number in ``[low, high]`` (``(low, high]`` with ``low_open``); ints are accepted."""
    value = params.get(name, default)
    ok = (not isinstance(value, bool) and isinstance(value, int | float)
          and (value > low if low_open else value >= low) and value <= high)
    if not ok:
        bracket = "(" if low_open else "["
        raise FaultRejected(f"{kind}: parameter {name!r} must be a number in {bracket}{low:g}, "
                            f"{high:g}], got {value!r}")
    return float(value)
