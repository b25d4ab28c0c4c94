"""The seam between the agent and what really applies a fault.

A backend is what the agent drives: the lab's virtual GPUs, or the real host
(NVML/CUDA, kmsg, pyroute2, FUSE, signals). Backends are structural: anything with
these members is a backend, so the lab never has to import ``faults``.
"""

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

#: How real an injection is (DESIGN §5), reported as ``injected_at``.
INJECTION_LAYERS = ("device", "driver", "telemetry", "network", "storage", "process",
                    "kubernetes", "virtual")


@dataclass(frozen=True)
class FaultRequest:
    """What to inject: a fault kind (``gpu.ecc``), its target on this node, its parameters."""

    kind: str
    target: Mapping[str, Any] = field(default_factory=dict)
    params: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "target": dict(self.target), "params": dict(self.params)}


class Backend(Protocol):
    """Applies and reverts faults on one node.

    ``apply`` raises :class:`gameday.errors.FaultRejected` (one-line reason) when the
    request is invalid or unsupported; nothing may be left applied in that case.
    ``revert`` must be idempotent and must not raise for a fault already gone.
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
