"""The GPU settings a fault changed, saved before the change so nothing outlives the fault.

``gpu.thermal`` with ``allow_device_settings`` lowers a GPU's power limit. NVML keeps
such a setting until someone sets it back (or the driver reloads), so the agent must
be able to put the *previous* value back even after it crashed: :class:`SettingsFile`
saves, per fault id, the GPU (by UUID: indexes may change across a reboot) and its
previous power limit, durably and atomically, *before* the setting is changed, and
forgets it only once the previous value is back. The agent keeps this file in its
state directory (``gameday agent serve --state-dir``), next to its own state file; a
revert after an agent restart, or from ``gameday cleanup``, reads it there.
"""

import json
import threading
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Final

from gameday.atomic import replace_file
from gameday.errors import AgentError

__all__ = ["SavedSetting", "SettingsFile"]

_VERSION: Final = 1


@dataclass(frozen=True)
class SavedSetting:
    """One GPU setting a fault changes: the GPU, the value before, the value it sets."""

    uuid: str
    setting: str  # "power_limit_mw"
    previous: int
    applied: int


class SettingsFile:
    """The JSON file at ``path``: fault id -> :class:`SavedSetting`, rewritten (atomic,
    fsynced) on every change. Thread-safe."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()

    def _read(self) -> dict[str, SavedSetting]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            return {fault_id: SavedSetting(**record)
                    for fault_id, record in data["settings"].items()}
        except FileNotFoundError:
            return {}
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise AgentError(f"{self.path}: saved GPU settings are unreadable ({exc}); "
                             "restore the GPUs' power limits by hand (nvidia-smi -pl) and "
                             "remove the file") from None

    def _write(self, settings: dict[str, SavedSetting]) -> None:
        payload: dict[str, Any] = {"version": _VERSION, "settings": {
            fault_id: asdict(saved) for fault_id, saved in sorted(settings.items())}}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        replace_file(self.path, json.dumps(payload, indent=1).encode("utf-8"), mode=0o600,
                     durable=True)

    def saved(self) -> dict[str, SavedSetting]:
        """Every setting saved and not yet restored, by fault id."""
        with self._lock:
            return self._read()

    def save(self, fault_id: str, saved: SavedSetting) -> None:
        """Save ``saved`` for ``fault_id`` durably (before the setting is changed)."""
        with self._lock:
            settings = self._read()
            settings[fault_id] = saved
            self._write(settings)

    def forget(self, fault_id: str) -> None:
        """Drop ``fault_id``'s record (once its previous value is back); idempotent."""
        with self._lock:
            settings = self._read()
            if settings.pop(fault_id, None) is not None:
                self._write(settings)
