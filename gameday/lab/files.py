"""Small file helpers: atomic writes (temp file + rename) and tolerant JSON reads."""

import contextlib
import json
import os
import threading
from pathlib import Path
from typing import Any

__all__ = ["read_json", "write_atomic", "write_json_atomic"]


def write_atomic(path: Path, data: str | bytes, *, mode: int = 0o644) -> None:
    """Replace ``path`` with ``data`` so that readers see the old or the new file, never a
    torn one (a temporary file in the same directory, renamed over ``path``)."""
    fd, tmp = _create_temporary(path, mode)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data.encode("utf-8") if isinstance(data, str) else data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _create_temporary(path: Path, mode: int) -> tuple[int, str]:
    """A new, empty file next to ``path`` that only this thread writes: named by process
    and thread (cheaper than :func:`tempfile.mkstemp`'s random names, as safe: created
    with ``O_EXCL | O_NOFOLLOW``, so never an existing file or a link). A leftover of a
    dead process that had the same pid is removed first; the directory is made on first
    use."""
    tmp = str(path.parent / f".{path.name}.{os.getpid()}-{threading.get_ident()}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    for _ in range(3):
        try:
            return os.open(tmp, flags, mode & 0o600), tmp
        except FileNotFoundError:
            path.parent.mkdir(parents=True, exist_ok=True)
        except FileExistsError:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
    return os.open(tmp, flags, mode & 0o600), tmp


def write_json_atomic(path: Path, obj: Any, *, mode: int = 0o644) -> None:
    """Write ``obj`` as indented JSON, atomically."""
    write_atomic(path, json.dumps(obj, indent=1, sort_keys=False) + "\n", mode=mode)


def read_json(path: Path) -> Any | None:
    """The JSON in ``path``; ``None`` when the file is missing or not (yet) valid JSON."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
