"""The seam between the agent and what really applies a fault.

A backend is what the agent drives: the lab's virtual GPUs, or the real host
(NVML/CUDA, kmsg, pyroute2, FUSE, signals). Backends are structural: anything with
these members is a backend, so the lab never has to import ``faults``.
"""

import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

#: How real an injection is (docs/architecture.md), reported as ``injected_at``:
#: ``device`` (a real effect on the GPU: memory really held), ``device-settings`` (a
#: real GPU setting changed: its power limit), ``driver`` (the driver itself reports
#: it), ``log`` (a line in the kernel log: only log readers see it), ``telemetry`` (DCGM
#: field injection, seen where the experiment's probes look), ``telemetry (DCGM cache
#: only)`` (injected into DCGM but not seen by the exporter the probes read), then
#: ``network``, ``storage``, ``process``, ``kubernetes``, ``virtual`` (the lab).
INJECTION_LAYERS = ("device", "device-settings", "driver", "log", "telemetry",
                    "telemetry (DCGM cache only)", "network", "storage", "process",
                    "kubernetes", "virtual")


@dataclass(frozen=True)
class FaultRequest:
    """What to inject: a fault kind (``gpu.ecc``), its target on this node, its parameters,
    and the run that asks for it (``run``, for the fault-window metric; may be empty), and
    the caller's request id (its idempotency key; ``""``: none)."""

    kind: str
    target: Mapping[str, Any] = field(default_factory=dict)
    params: Mapping[str, Any] = field(default_factory=dict)
    run: str = ""
    request_id: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "target": dict(self.target), "params": dict(self.params)}


class Backend(Protocol):
    """Applies and reverts faults on one node.

    ``apply`` raises :class:`gameday.errors.FaultRejected` (one-line reason) when the
    request is invalid or unsupported; nothing may be left applied in that case.
    ``revert`` must be idempotent and must not raise for a fault already gone.

    Optional batch hook: a backend may also have ``batch() -> ContextManager[None]``.
    The registry then wraps each batch (a ``:batch`` apply, a ``:batch-revert``, the
    reaper's reverts) in it and still calls ``apply``/``revert`` once per fault, in
    order, so per-fault results, refusals and rollbacks stay as they are; the backend
    may defer the side effects it can share (publishing a device's state, saving its
    own records) to the end of the batch, which must run even when the batch raises.
    The lab's :class:`gameday.lab.devices.VirtualGpuBackend` publishes its GPUs' state
    and fault records once per batch. See :func:`backend_batch`.

    Optional ahead hook: ``ahead(change, items) -> ContextManager[None]``, ``change``
    ``"apply"`` or ``"revert"`` and ``items`` the ``(fault_id, request)`` a batch is
    about to apply or revert, in order: the registry enters it before the batch's first
    ``apply``/``revert`` and leaves it after the last. The agent's audit trail
    (:class:`gameday.agent.audited.AuditedBackend`) writes the batch's records there,
    durable together, instead of one ``fsync`` per change. See :func:`backend_ahead`.

    Optional check hook: ``check(request) -> dict`` answers what ``apply`` would do
    without doing it: it raises what ``apply`` would raise for an invalid or refused
    request, and returns what the target would hit (``{"processes": [...]}``,
    ``{"interfaces": [...]}``, ``{"paths": [...]}``, ``{"gpus": [...]}``). It signals,
    mounts, writes and locks nothing. See :func:`backend_check`.
    """

    name: str

    def inventory(self) -> dict[str, Any]:
        """``{"node": str, "gpus": [{"index", "uuid", "name", "memory_mib", "nvlink_domain"}],
        "links": [...], "mounts": [...]}``."""
        ...

    def kinds(self) -> Mapping[str, str]:
        """Fault kinds this backend can apply, each with its injection layer."""
        ...

    def apply(self, fault_id: str, request: FaultRequest) -> dict[str, Any]:
        """Apply the fault; return details worth recording (JSON-serialisable)."""
        ...

    def revert(self, fault_id: str, request: FaultRequest) -> None:
        """Undo the fault (idempotent)."""
        ...


def backend_batch(backend: object) -> contextlib.AbstractContextManager[object]:
    """The backend's optional ``batch()`` context (see :class:`Backend`), else a no-op."""
    batch = getattr(backend, "batch", None)
    return batch() if callable(batch) else contextlib.nullcontext()


def backend_ahead(backend: object, change: Literal["apply", "revert"],
                  items: Sequence[tuple[str, FaultRequest]]
                  ) -> contextlib.AbstractContextManager[object]:
    """The backend's optional ``ahead(change, items)`` context (see :class:`Backend`),
    else a no-op."""
    ahead = getattr(backend, "ahead", None)
    return ahead(change, items) if callable(ahead) and items else contextlib.nullcontext()


def backend_check(backend: object, request: FaultRequest) -> dict[str, Any]:
    """What ``request`` would hit, through the backend's optional ``check`` (see
    :class:`Backend`), else ``{}``; raises what the backend's ``apply`` would."""
    check = getattr(backend, "check", None)
    return dict(check(request)) if callable(check) else {}
