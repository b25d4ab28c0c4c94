"""The agent's state file: the faults it holds, written atomically on every change.

A crash (even ``kill -9``) leaves either the old or the new file, never a torn one:
the content goes to a temporary file in the same directory, is fsynced, then renamed
over the old file with :func:`os.replace`, and the directory is fsynced
(:func:`gameday.atomic.replace_file`; the directory is kept open between saves, until
:meth:`StateFile.close`).

Each fault is saved as its JSON object (:meth:`gameday.agent.fault.Fault.to_json`) with
the ``state`` of its entry (``applying``, ``active``, ``reverting``) added at the end.
"""

import json
import pathlib
from collections.abc import Mapping, Sequence
from typing import Any, Final

from gameday.atomic import DirectorySync, replace_file
from gameday.errors import AgentError

__all__ = ["STATE_VERSION", "StateFile"]

STATE_VERSION: Final = 1

_ENCODER: Final = json.JSONEncoder(separators=(",", ":"))  # compact: the C encoder


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

    def save(self, faults: Sequence[Mapping[str, Any]], *, node: str, saved_at: float
             ) -> None:
        """Replace the file's content atomically with ``faults`` (fault dicts, each with
        its entry's ``state``)."""
        payload = _ENCODER.encode({"version": STATE_VERSION, "node": node,
                                   "saved_at": saved_at, "faults": faults})
        replace_file(self.path, payload.encode("utf-8"), mode=0o600, durable=True,
                     directory=self._directory)

    def close(self) -> None:
        """Close the state file's directory, kept open between saves (a later save
        opens it again)."""
        self._directory.close()
