"""What a virtual fault kind is, and the target check every kind shares.

A :class:`VirtualFault` turns a request (its target, and its parameters as the kind's
declaration in :mod:`gameday.kinds` parsed them: typed, checked, defaults filled in)
into a :class:`GpuChange`, or raises :class:`gameday.errors.FaultRejected` with a
one-line reason. The change names the fields of a GPU's state that the fault sets, and their
values; the backend records the values they had, and reverting restores them.
"""

from collections.abc import Collection, Mapping, Sequence
from typing import Any, Protocol, TypeGuard

from gameday.errors import FaultRejected
from gameday.kinds import KindParams, KindSpec
from gameday.lab.gpustate import GpuState

__all__ = [
    "GpuChange",
    "GrowingChange",
    "VirtualFault",
    "check_known",
    "is_growing",
    "target_gpu",
]


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

    @property
    def spec(self) -> KindSpec[KindParams]:
        """The kind's declaration, which parses the request's parameters."""
        ...

    def validate(self, target: Mapping[str, Any], params: Any,
                 gpus: Sequence[GpuState]) -> GpuChange:
        """Check ``target`` and the parsed ``params`` (the kind's own
        :class:`~gameday.kinds.KindParams`) against this node's ``gpus``; raise
        :class:`FaultRejected` (one line) when it cannot be applied."""
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
