"""The agent's safety lever: while it is engaged the agent holds no fault and applies none.

Engaging it (``POST /v1/halt``, or the fleet's Kubernetes object seen by
:mod:`gameday.agent.halt_watch`) reverts every fault the agent holds at once (reason
``halted``) and makes every inject, batch, check and renewal answer ``423 Locked`` with
``code: halted`` and a one-line reason naming who engaged it, when and why, until it is
released (``DELETE /v1/halt``, or the object released). Its state is a small JSON file
in the agent's state directory, written atomically and fsync'd before the answer, so a
lever engaged before a crash or restart is engaged again when the agent starts.

A lever engaged through the API is released through the API; one engaged from the
Kubernetes object (``source: kubernetes``) is released when the object is, so a fleet
lever holds on every node whoever else asks to release it locally.
"""

import json
import pathlib
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, Final, Literal

from gameday.atomic import replace_file
from gameday.errors import AgentError, GamedayError, InvalidInput

__all__ = ["HALT_STATUS", "Halted", "Lever", "LeverState", "halt_path", "parse_engage"]

#: The status of every answer a halted agent refuses (RFC 4918 ``423 Locked``).
HALT_STATUS: Final = 423
#: Longest ``reason`` kept (longer ones are cut, so a reason stays one line).
MAX_REASON_CHARS: Final = 300

LeverSource = Literal["api", "kubernetes"]


@dataclass(frozen=True)
class LeverState:
    """The lever as it is: ``engaged``, by whom (client identity: certificate CN or token
    name, else the source address; ``kubernetes:<namespace>/<name>`` from the fleet
    object), when (epoch seconds), why, and through what (``api`` or ``kubernetes``).
    ``released_by``/``released_at`` tell the last release."""

    engaged: bool = False
    reason: str = ""
    engaged_by: str = ""
    engaged_at: float | None = None
    source: LeverSource = "api"
    released_by: str = ""
    released_at: float | None = None

    def line(self, node: str) -> str:
        """One line: who halted the agent on ``node``, when and why."""
        if not self.engaged:
            return f"node {node}: lever released"
        when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.engaged_at or 0))
        return (f"node {node} is halted by {self.engaged_by or 'unknown'} at {when}"
                f" ({self.source}): {self.reason or 'no reason given'}")

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: object, where: str) -> "LeverState":
        """The state saved as :meth:`to_json`; :class:`AgentError` naming ``where`` if it
        is not one."""
        if not isinstance(data, dict):
            raise AgentError(f"{where}: lever state is not a JSON object")
        try:
            state = cls(**{key: data[key] for key in cls.__dataclass_fields__ if key in data})
        except TypeError as exc:
            raise AgentError(f"{where}: lever state is unreadable ({exc})") from None
        if not isinstance(state.engaged, bool) or state.source not in ("api", "kubernetes"):
            raise AgentError(f"{where}: lever state is unreadable (engaged or source)")
        return state


class Halted(GamedayError):
    """The agent's lever is engaged: nothing is applied or renewed (``423``, code
    ``halted``); ``state`` says who engaged it, when and why."""

    def __init__(self, state: LeverState, node: str) -> None:
        self.state = state
        super().__init__(f"{state.line(node)}; release it with `gameday halt --release`")


def halt_path(state_path: pathlib.Path) -> pathlib.Path:
    """Where the lever of the agent whose state file is ``state_path`` is saved."""
    return state_path.with_name(f"{state_path.stem}.halt.json")


def parse_engage(body: object) -> str:
    """The reason of a ``POST /v1/halt`` body (``{"reason": TEXT}``, or none)."""
    if body is None:
        return ""
    if not isinstance(body, dict):
        raise InvalidInput("body must be a JSON object like {\"reason\": \"...\"}")
    unknown = sorted(set(body) - {"reason"})
    if unknown:
        raise InvalidInput(f"unknown key {unknown[0]!r} in the halt body (known: reason)")
    reason = body.get("reason", "")
    if not isinstance(reason, str):
        raise InvalidInput("reason must be a string")
    return " ".join(reason.split())[:MAX_REASON_CHARS]


class Lever:
    """The lever of the agent on ``node``, saved at ``path``; ``revert_all`` reverts every
    fault the agent holds (called on every engagement, outside the lever's lock).

    :meth:`check` is what the registry calls, under its own lock, before it admits a
    fault: once :meth:`engage` has returned, no fault is applied until :meth:`release`.
    """

    def __init__(self, path: pathlib.Path, node: str, *,
                 clock: Callable[[], float] = time.time) -> None:
        self.path = path
        self.node = node
        self._clock = clock
        self._lock = threading.Lock()
        self._state = self._load()
        self.revert_all: Callable[[], object] = lambda: None

    @property
    def state(self) -> LeverState:
        return self._state

    def check(self) -> None:
        """:class:`Halted` while the lever is engaged."""
        state = self._state
        if state.engaged:
            raise Halted(state, self.node)

    def engage(self, reason: str, by: str, source: LeverSource = "api") -> LeverState:
        """Engage (or keep engaged: the first engagement's who/when/why stay, but a
        Kubernetes engagement takes over one made through the API, so that releasing the
        fleet object releases it), save it, then revert every fault held."""
        with self._lock:
            current = self._state
            if not current.engaged or (source == "kubernetes" and current.source == "api"):
                self._save(LeverState(True, reason, by, self._clock(), source,
                                      current.released_by, current.released_at))
        self.revert_all()
        return self._state

    def release(self, by: str, source: LeverSource = "api") -> LeverState:
        """Release the lever (a no-op when it is not engaged). :class:`Halted` when it was
        engaged from Kubernetes and ``source`` is the API: the fleet object holds it."""
        with self._lock:
            current = self._state
            if not current.engaged:
                return current
            if current.source == "kubernetes" and source == "api":
                raise Halted(current, self.node)
            self._save(LeverState(False, current.reason, current.engaged_by,
                                  current.engaged_at, current.source, by, self._clock()))
            return self._state

    def _save(self, state: LeverState) -> None:
        payload = json.dumps({"version": 1, "node": self.node, **state.to_json()})
        replace_file(self.path, payload.encode("utf-8"), mode=0o600, durable=True)
        self._state = state

    def _load(self) -> LeverState:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return LeverState()
        except OSError as exc:
            raise AgentError(f"{self.path}: cannot read the lever ({exc.strerror})") from None
        try:
            data = json.loads(text)
        except ValueError:
            raise AgentError(f"{self.path}: the lever is not JSON; fix or remove it "
                             "(remove only if the fleet is not meant to be halted)") from None
        return LeverState.from_json(data, str(self.path))
