"""Small file helpers: atomic writes (temp file + rename) and tolerant JSON reads."""

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["read_json", "write_atomic", "write_json_atomic"]


def write_atomic(path: Path, data: str | bytes, *, mode: int = 0o644) -> None:
    """Replace ``path`` with ``data`` so that readers see the old or the new file, never a
    torn one (a temporary file in the same directory, renamed over ``path``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data.encode("utf-8") if isinstance(data, str) else data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_json_atomic(path: Path, obj: Any, *, mode: int = 0o644) -> None:
    """Write ``obj`` as indented JSON, atomically."""
    write_atomic(path, json.dumps(obj, indent=1, sort_keys=False) + "\n", mode=mode)


def read_json(path: Path) -> Any | None:
    """The JSON in ``path``; ``None`` when the file is missing or not (yet) valid JSON."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
