"""The agent's state file: the faults it holds, written atomically on every change.

A crash (even ``kill -9``) leaves either the old or the new file, never a torn one:
the content goes to a temporary file in the same directory, is fsynced, then renamed
over the old file with :func:`os.replace`, and the directory is fsynced
(:func:`gameday.atomic.replace_file`; the directory is kept open between saves, until
:meth:`StateFile.close`).

Each fault is saved as its JSON object (:attr:`gameday.agent.fault.Fault.encoded`) with
the ``state`` of its entry (``applying``, ``active``, ``reverting``) added at the end
(:func:`with_state`); the file is put together from these texts, not encoded again.
"""

import json
import pathlib
from collections.abc import Sequence
from json.encoder import encode_basestring_ascii
from typing import Any, Final

from gameday.atomic import DirectorySync, replace_file
from gameday.errors import AgentError
from gameday.jsontext import scalar_json

__all__ = ["STATE_VERSION", "StateFile", "with_state"]

STATE_VERSION: Final = 1

_ENCODER: Final = json.JSONEncoder(separators=(",", ":"))  # compact: the C encoder


#: The text added for each state an entry can be in (any other is encoded).
_STATE_TAILS: Final = {state: f',"state":{_ENCODER.encode(state)}}}'
                       for state in ("applying", "active", "reverting")}


def with_state(fault_json: str, state: str) -> str:
    """A fault's JSON object (text, with at least one key) with ``"state": state`` added
    as its last key."""
    tail = _STATE_TAILS.get(state) or f',"state":{_ENCODER.encode(state)}}}'
    return f"{fault_json[:-1]}{tail}"


class StateFile:
    """The JSON file at ``path`` holding the agent's live faults (as fault dicts).

    Its user serialises :meth:`save` and :meth:`close` (the registry's lock)."""

    def __init__(self, path: pathlib.Path) -> None:
        self.path = path
        self._directory = DirectorySync(path.parent)

    def load(self) -> list[dict[str, Any]]:
        """The faults saved in the file; ``[]`` if there is no file.

        Raises :class:`AgentError` if the file cannot be read or understood: the agent
        must not start over leftovers it cannot revert.
        """
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise AgentError(f"{self.path}: cannot read agent state ({exc.strerror})") from None
        try:
            data = json.loads(text)
            faults = data["faults"]
            if not isinstance(faults, list) or not all(isinstance(f, dict) for f in faults):
                raise TypeError("faults is not a list of objects")
        except (ValueError, KeyError, TypeError) as exc:
            raise AgentError(
                f"{self.path}: agent state is unreadable ({exc}); revert its faults by hand "
                "and remove the file to start") from None
        return faults

    def save(self, faults: Sequence[str], *, node: str, saved_at: float) -> None:
        """Replace the file's content atomically with ``faults``, each a JSON object as
        text (:func:`with_state`)."""
        saved = scalar_json(saved_at) or _ENCODER.encode(saved_at)
        payload = (f'{{"version":{STATE_VERSION},"node":{encode_basestring_ascii(node)},'
                   f'"saved_at":{saved},"faults":[{",".join(faults)}]}}')
        replace_file(self.path, payload.encode("utf-8"), mode=0o600, durable=True,
                     directory=self._directory)

    def close(self) -> None:
        """Close the state file's directory, kept open between saves (a later save
        opens it again)."""
        self._directory.close()
