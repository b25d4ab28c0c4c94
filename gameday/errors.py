"""One error base for gameday, with specific subclasses.

User-facing errors are one line: what was wrong, where (file, key path, line) and
what to do. The CLI prints ``str(error)`` and exits with ``error.exit_code``.
"""

from collections.abc import Callable
from typing import ParamSpec, TypeVar

_P = ParamSpec("_P")
_T = TypeVar("_T")


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


class InputErrors:
    """Every :class:`InvalidInput` of one input file, in the order its checks ran, instead
    of the first alone: each independent check runs through :meth:`attempt` or
    :meth:`value`, and the caller reports them all (``gameday validate``) or raises the
    first (a loader: :meth:`raise_first`)."""

    def __init__(self) -> None:
        self.found: list[InvalidInput] = []

    def __bool__(self) -> bool:
        return bool(self.found)

    def add(self, error: InvalidInput) -> None:
        self.found.append(error)

    def attempt(self, check: Callable[_P, object], *args: _P.args, **kwargs: _P.kwargs
                ) -> bool:
        """Run ``check``: True when it raised nothing, else False and its error kept."""
        try:
            check(*args, **kwargs)
        except InvalidInput as exc:
            self.found.append(exc)
            return False
        return True

    def value(self, check: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs
              ) -> _T | None:
        """``check``'s value, or None when it raised (its error kept)."""
        try:
            return check(*args, **kwargs)
        except InvalidInput as exc:
            self.found.append(exc)
            return None

    def by_line(self) -> list[InvalidInput]:
        """The errors in the file's line order (those without a line first), each key's
        in the order found."""
        return sorted(self.found, key=lambda error: error.line or 0)

    def raise_first(self) -> None:
        if self.found:
            raise self.found[0]


def checked(value: _T | None, errors: list[InvalidInput]) -> _T:
    """What a ``check_*`` function found valid, or the first of its errors raised: how
    each loader (``load_experiment``, ``load_playbook``, ...) turns every error into one."""
    if errors:
        raise errors[0]
    assert value is not None
    return value


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
