"""Recording verifier results in the session, and failing with one line."""

from typing import Any, NoReturn

import structlog
from chaoslib.exceptions import ActivityFailed

from gameday.engine.session import current
from gameday.engine.verdicts import VerifierResult
from gameday.errors import one_line

log = structlog.get_logger("verifiers")



def record(verifier: str, passed: bool | None, measurement: dict[str, Any],
           reason: str = "") -> VerifierResult:
    """Record one verifier result in the current session and log it."""
    result = VerifierResult(verifier=verifier, passed=passed, measurement=measurement,
                            reason=one_line(reason))
    current().record(result)
    log.info("verifier result", verifier=verifier, passed=passed, reason=result.reason)
    return result


def fail(verifier: str, reason: str, measurement: dict[str, Any] | None = None) -> NoReturn:
    """Record a failed result and raise ``ActivityFailed`` with the one-line ``reason``."""
    result = record(verifier, False, dict(measurement or {}), reason)
    raise ActivityFailed(result.reason) from None
