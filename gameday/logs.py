"""Logging: structlog everywhere, JSON lines to a file, only warnings on the terminal.

Secrets never reach the logs: values under keys that look like secrets are redacted.
"""

import functools
import logging
import logging.handlers
import sys
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

import structlog

SECRET_WORDS = ("token", "secret", "password", "authorization", "api_key")
#: What a secret's value is shown as, in logs, journals, the agent's audit and metrics.
REDACTED = "[redacted]"


def _holds_a_secret_word(name: str) -> bool:
    return any(word in name.lower() for word in SECRET_WORDS)


#: The answers for short key names, remembered: a batch's records repeat the same few
#: keys (the check was a tenth of an audited agent's time). Only short names, so what is
#: remembered stays small (at most 4,096 names of 64 characters) whatever clients send.
_short_name_secret = functools.lru_cache(maxsize=4096)(_holds_a_secret_word)


def names_secret(name: str) -> bool:
    """Whether the key ``name`` names a secret: it holds one of :data:`SECRET_WORDS`, in
    any case. The one such check, for logs, journals and the agent."""
    return _short_name_secret(name) if len(name) <= 64 else _holds_a_secret_word(name)


def writes_info(logger: Any) -> bool:
    """Whether a structlog ``logger`` writes INFO events now: ``False`` only when it says
    so (``is_enabled_for``, as a filtering logger set above INFO does), so that an event
    per item of a batch is not even put together when nothing would write it."""
    enabled = getattr(logger, "is_enabled_for", None)
    return True if enabled is None else bool(enabled(logging.INFO))


def redact(logger: Any, method: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    for key in list(event):
        if names_secret(key):
            event[key] = REDACTED
    return event


def _quiet_toolkit(record: logging.LogRecord) -> bool:
    """The toolkit's own chatter goes to the log file only; its errors still show."""
    return not record.name.startswith("chaostoolkit") or record.levelno >= logging.ERROR


class _TerminalHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes each record to ``sys.stderr`` as it is at that moment, not as it was when
    logging was set up: a live progress display (rich's, in ``gameday play``) redirects
    ``sys.stderr`` so that a log line lands above its progress line instead of through it."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        """The stream is always the current ``sys.stderr``."""


def configure(log_file: Path | None, *, terminal_level: int = logging.WARNING) -> None:
    """Route structlog and stdlib logging (chaoslib's too) to a JSON file and stderr."""
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        redact,
    ]
    structlog.configure(
        processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    root = logging.getLogger()
    root.handlers.clear()
    root.setLevel(logging.DEBUG if log_file else terminal_level)
    terminal = _TerminalHandler()
    terminal.setLevel(terminal_level)
    terminal.addFilter(_quiet_toolkit)
    terminal.setFormatter(structlog.stdlib.ProcessorFormatter(
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                    structlog.dev.ConsoleRenderer(colors=False)],
        foreign_pre_chain=shared))
    root.addHandler(terminal)
    if log_file is not None:
        log_file.parent.mkdir(parents=True, exist_ok=True)
        to_file = logging.handlers.RotatingFileHandler(log_file, maxBytes=10_000_000,
                                                       backupCount=3)
        to_file.setLevel(logging.INFO)
        to_file.setFormatter(structlog.stdlib.ProcessorFormatter(
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                        structlog.processors.JSONRenderer()],
            foreign_pre_chain=shared))
        root.addHandler(to_file)
    logging.getLogger("chaostoolkit").propagate = True
    logging.getLogger("urllib3").setLevel(logging.WARNING)
