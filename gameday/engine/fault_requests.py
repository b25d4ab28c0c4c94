"""What a fault request and its outcome are: :class:`InjectRequest` (one fault to
inject through an agent), :class:`TargetResult` and :class:`FanoutReport` (what happened
to each target of a fan-out), :class:`FanoutFailed` (some failed; the rest was rolled
back) and :class:`NotApplied` (not applied because another target of its batch failed).

The path that sends them is :class:`gameday.engine.injector.FaultInjector`.
"""

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gameday.contract.gpus import gpu_label
from gameday.engine.fanout import FanoutOptions
from gameday.errors import GamedayError

__all__ = ["FanoutFailed", "FanoutOptions", "FanoutReport", "InjectRequest", "NotApplied",
           "TargetResult"]


@dataclass(frozen=True, slots=True)
class InjectRequest:
    """One fault to inject through an agent: on ``node``, ``kind`` at ``target``."""

    node: str
    kind: str
    target: Mapping[str, Any]
    params: Mapping[str, Any] = field(default_factory=dict)
    #: the idempotency key its intent is recorded under before it is sent ("": none yet)
    request_id: str = ""

    def label(self) -> str:
        """``node-0/gpu2`` for a GPU (as :meth:`GpuRef.label`), else ``node/key=value,...``."""
        if set(self.target) == {"gpu"}:
            return gpu_label(self.node, self.target["gpu"])
        where = ",".join(f"{k}={v}" for k, v in sorted(self.target.items()))
        return f"{self.node}/{where}" if where else self.node


@dataclass(frozen=True)
class TargetResult:
    """What happened to one target: applied (with the fault id) or failed (why)."""

    node: str
    target: Mapping[str, Any]
    ok: bool
    attempts: int
    fault_id: str | None = None
    error: str | None = None

    def label(self) -> str:
        where = ",".join(f"{k}={v}" for k, v in sorted(self.target.items()))
        return f"{self.node}/{where}" if where else self.node


@dataclass
class FanoutReport:
    """Every target's result, and what was rolled back after a partial failure."""

    results: list[TargetResult] = field(default_factory=list)
    rolled_back: list[str] = field(default_factory=list)
    rollback_failures: list[str] = field(default_factory=list)
    wall_s: float = 0.0

    @property
    def failed(self) -> list[TargetResult]:
        return [r for r in self.results if not r.ok]

    @property
    def applied(self) -> list[TargetResult]:
        return [r for r in self.results if r.ok]

    def summary(self) -> str:
        """One line: counts, then the first few failures with their reasons."""
        line = (f"{len(self.applied)} of {len(self.results)} targets ok, "
                f"{len(self.failed)} failed")
        if self.failed:
            shown = "; ".join(f"{r.label()}: {r.error}" for r in self.failed[:3])
            more = f" (+{len(self.failed) - 3} more)" if len(self.failed) > 3 else ""
            line += f" ({shown}{more})"
        if self.rolled_back or self.rollback_failures:
            line += f"; rolled back {len(self.rolled_back)}"
        if self.rollback_failures:
            line += (f", {len(self.rollback_failures)} could not be reverted "
                     f"({self.rollback_failures[0]})")
        return line


class FanoutFailed(GamedayError):
    """Some targets of a fan-out failed; what was applied has been rolled back."""

    def __init__(self, report: FanoutReport) -> None:
        self.report = report
        super().__init__(f"fan-out failed: {report.summary()}")


class NotApplied(GamedayError):
    """A target of a batch that the agent did not apply because another target of the
    same batch failed (all or nothing per agent)."""
