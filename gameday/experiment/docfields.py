"""Typed access to a YAML document's fields, with errors that name file, key path and line.

Playbooks, fault mixes and coverage requirement files are read with
``gameday.experiment.loader.read_document`` (which maps every key path to its line) and then
checked field by field through a ``Document``; every mistake is one ``InvalidInput``
line such as ``playbooks/x.yaml:12: experiments[1].expect: must be one of pass, fail``.
A loader runs each independent check through the document's :attr:`Document.errors`
(:class:`gameday.errors.InputErrors`, as experiments' validation does), so one run
reports every mistake of a file; :meth:`Document.only_keys` records each unknown key
there rather than raising.
"""

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from gameday.errors import InputErrors, InvalidInput
from gameday.experiment.loader import line_of, read_document


def join(base: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{base}[{key}]"
    return f"{base}.{key}" if base else key


@dataclass
class Document:
    """A parsed file plus its key-path → line map, and the errors its checks found."""

    path: Path
    data: dict[str, Any]
    lines: dict[str, int]
    errors: InputErrors = field(default_factory=InputErrors)

    @classmethod
    def read(cls, path: Path) -> "Document":
        data, lines = read_document(path)
        return cls(path, data, lines)

    def line_of(self, key_path: str) -> int | None:
        return line_of(self.lines, key_path)

    def error(self, message: str, key_path: str) -> InvalidInput:
        return InvalidInput(message, file=str(self.path), path=key_path or None,
                            line=self.line_of(key_path))

    def fail(self, message: str, key_path: str) -> NoReturn:
        raise self.error(message, key_path)

    def get(self, key_path: str) -> Any:
        """The value at a dotted/indexed key path, or None."""
        value: Any = self.data
        for part in key_path.replace("[", ".[").split("."):
            if not part:
                continue
            if part.startswith("["):
                index = int(part[1:-1])
                value = value[index] if isinstance(value, list) and index < len(value) else None
            else:
                value = value.get(part) if isinstance(value, Mapping) else None
            if value is None:
                return None
        return value

    # -- typed fields ----------------------------------------------------------------
    def mapping(self, key_path: str, *, required: bool = False) -> dict[str, Any]:
        value = self.get(key_path)
        if value is None:
            if required:
                self.fail("is required", key_path)
            return {}
        if not isinstance(value, dict):
            self.fail(f"must be a mapping, got {type(value).__name__}", key_path)
        return value

    def sequence(self, key_path: str, *, required: bool = False) -> list[Any]:
        value = self.get(key_path)
        if value is None:
            if required:
                self.fail("is required", key_path)
            return []
        if not isinstance(value, list):
            self.fail(f"must be a list, got {type(value).__name__}", key_path)
        return value

    def text(self, key_path: str, *, required: bool = False,
             default: str | None = None) -> str | None:
        value = self.get(key_path)
        if value is None:
            if required:
                self.fail("is required", key_path)
            return default
        if not isinstance(value, str) or not value.strip():
            self.fail(f"must be a non-empty string, got {value!r}", key_path)
        return value

    def choice(self, key_path: str, choices: Iterable[str], default: str) -> str:
        options = tuple(choices)
        value = self.text(key_path, default=default)
        if value not in options:
            self.fail(f"must be one of {', '.join(options)}, got {value!r}", key_path)
        return value

    def number(self, key_path: str, *, minimum: float | None = None,
               maximum: float | None = None, integer: bool = False,
               default: float | None = None) -> float | None:
        value = self.get(key_path)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int | float) or (
                integer and not isinstance(value, int)):
            self.fail(f"must be {'an integer' if integer else 'a number'}, got {value!r}",
                      key_path)
        if minimum is not None and value < minimum:
            self.fail(f"must be >= {minimum:g}, got {value!r}", key_path)
        if maximum is not None and value > maximum:
            self.fail(f"must be <= {maximum:g}, got {value!r}", key_path)
        return float(value)

    def only_keys(self, key_path: str, known: Iterable[str]) -> None:
        """Record each unknown key in the mapping at ``key_path`` in :attr:`errors` (typos
        are errors; the known keys are still checked)."""
        allowed = sorted(known)
        value = self.data if not key_path else self.get(key_path)
        if not isinstance(value, dict):
            return
        for key in value:
            if key not in allowed:
                self.errors.add(self.error(f"unknown key (known: {', '.join(allowed)})",
                                           join(key_path, str(key))))

    def relative(self, value: str) -> Path:
        """A path written in this file, resolved against the file's directory."""
        candidate = Path(value)
        if candidate.is_absolute():
            return candidate
        return Path(os.path.normpath(self.path.parent / candidate))
