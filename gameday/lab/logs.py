"""structlog set-up for lab processes: one JSON object per line on stderr.

The process that starts a lab process points its stderr at ``DIR/logs/<name>.log``.
"""

import sys
from collections.abc import MutableMapping
from typing import Any

import structlog

__all__ = ["configure_logging"]


def configure_logging(process: str) -> None:
    """Log JSON lines to stderr, each tagged with ``process``."""

    def add_process(_logger: Any, _method: str,
                    event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
        event.setdefault("process", process)
        return event

    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            add_process,
            structlog.processors.dict_tracebacks,
            structlog.processors.JSONRenderer(),
        ],
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=True,
    )
