"""One verifier's result, as verifiers record it, the judge reads it and reports show it."""

from dataclasses import dataclass, field
from typing import Any

from gameday.evidence.journal_shape import VerifierResultJSON


@dataclass
class VerifierResult:
    """One verifier's measurement and verdict.

    ``passed`` is None for a pure measurement with no objective to meet.
    ``reason`` is one line, e.g. ``rto 23.4 s > slo 20 s (missed by 3.4 s)``.
    """

    verifier: str
    passed: bool | None
    measurement: dict[str, Any] = field(default_factory=dict)
    reason: str = ""
    name: str = ""
    at: float = 0.0

    def to_json(self) -> VerifierResultJSON:
        return {"verifier": self.verifier, "name": self.name, "passed": self.passed,
                "reason": self.reason, "measurement": self.measurement, "at": self.at}
