"""One error base for gameday, with specific subclasses.

User-facing errors are one line: what was wrong, where (file, key path, line) and
what to do. The CLI prints ``str(error)`` and exits with ``error.exit_code``.
"""


class GamedayError(Exception):
    """Base of every error gameday raises on purpose."""

    exit_code = 1


class InvalidInput(GamedayError):
    """The user's input (experiment, playbook, argument) is wrong; nothing was injected."""

    exit_code = 2

    def __init__(self, message: str, *, file: str | None = None, path: str | None = None,
                 line: int | None = None) -> None:
        message, path = _one_line(message), _one_line(path) if path is not None else None
        self.file = file
        self.path = path
        self.line = line
        where = ""
        if file:
            where = file + (f":{line}" if line else "")
        if path:
            where = f"{where}: {path}" if where else path
        super().__init__(f"{where}: {message}" if where else message)


def _one_line(text: str) -> str:
    """User errors are one line, even when the input put line breaks in a key."""
    return text.replace("\r", "\\r").replace("\n", "\\n")


class BlastRadiusExceeded(InvalidInput):
    """The resolved targets exceed the experiment's blast radius; nothing was injected."""


class TargetUnavailable(GamedayError):
    """A target (lab, agent, cluster) cannot be reached or resolved."""

    exit_code = 2


class AgentError(GamedayError):
    """An agent refused or failed a request."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        self.status = status
        super().__init__(message)


class FaultRejected(GamedayError):
    """A backend refused to apply a fault (bad parameters, unsupported, out of range)."""


class PolicyRefused(FaultRejected):
    """An agent's policy does not allow this fault, target or lease (``403``); raised by
    the agent's registry and by the backends that enforce the policy."""


class ProtectedTarget(FaultRejected):
    """A process selector matched a process gameday never signals (itself, an ancestor,
    an agent, PID 1, ...); the message names each (pid and why). Nothing was
    signalled. An agent answers it with ``403``; an orchestrator exits 2."""

    exit_code = 2


class LabError(GamedayError):
    """The embedded lab could not start, stop or answer."""


class LabSettingError(InvalidInput, LabError):
    """The lab cannot start from these settings (its shape, ``$GAMEDAY_PROMETHEUS``, a lab
    of another shape already running there): bad input, nothing was started."""


class ObservabilityError(GamedayError):
    """A metrics file could not be written, or the Pushgateway or Alertmanager refused or
    did not answer."""


def first_line(exc: BaseException) -> str:
    """The first non-blank line of ``exc``'s message; its type's name when it has none."""
    lines = str(exc).strip().splitlines()
    return lines[0].strip() if lines else type(exc).__name__


def one_line(text: str, limit: int = 400) -> str:
    """``text`` on one line (runs of white space made one space), shortened to ``limit``
    characters with an ellipsis."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
