"""``gameday validate FILE...``: every error of every file, whatever the file is.

A file is recognised by its top-level keys: a playbook (``experiments`` or ``draw``), a
target configuration (only ``allow`` and ``agents``), a coverage requirement file (only
``coverage``, with ``title``/``description``), a fault mix (``categories``, with
``title``/``description``/``source``/``window``/``notes``), else an experiment. A
playbook's experiments (listed and in its fault mix) are validated too, with the
playbook's variables and target, and the playbook is valid only when they all are. Every
error is one line, ``file:line: key.path: message``; the exit code is 2 when there is any,
else 0.
"""

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gameday.errors import InvalidInput
from gameday.experiment.loader import check_experiment, read_document

__all__ = ["FileReport", "ValidationReport", "file_kind", "validate_files"]

_TARGET_CONFIG_KEYS = frozenset({"allow", "agents"})
_REQUIREMENT_KEYS = frozenset({"coverage", "title", "description", "version"})
_FAULT_MIX_KEYS = frozenset({"title", "description", "source", "window", "categories",
                             "notes"})


@dataclass
class FileReport:
    """One file: what it is, and its errors (one line each)."""

    path: Path
    kind: str
    errors: list[str] = field(default_factory=list)
    named_by: Path | None = None  # the playbook that names this experiment
    #: a playbook's: how many experiments it names, how many of them have errors, and
    #: their errors (a playbook is valid only when all it names is)
    named: int = 0
    named_failing: int = 0
    named_errors: int = 0

    @property
    def valid(self) -> bool:
        return not self.errors and not self.named_errors

    def verdict(self) -> str:
        """``valid``, or what is wrong, counted: ``3 errors``, or for a playbook whose
        experiments fail ``invalid: 30 errors in 10 of the 21 experiments it names``."""
        parts = [f"{len(self.errors)} error{'' if len(self.errors) == 1 else 's'}"
                 ] if self.errors else []
        if self.named_errors:
            parts.append(f"{'invalid: ' if not parts else ''}{self.named_errors} "
                         f"error{'' if self.named_errors == 1 else 's'} in "
                         f"{self.named_failing} of the {self.named} experiment"
                         f"{'' if self.named == 1 else 's'} it names")
        return ", ".join(parts) or "valid"

    def to_json(self) -> dict[str, Any]:
        return {"file": str(self.path), "kind": self.kind, "valid": self.valid,
                "errors": self.errors,
                "named_by": str(self.named_by) if self.named_by else None}


@dataclass
class ValidationReport:
    files: list[FileReport] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return 2 if any(f.errors for f in self.files) else 0

    def errors(self) -> list[str]:
        """Every error of every file, in order (the terminal's standard error)."""
        return [error for report in self.files for error in report.errors]

    def lines(self) -> list[str]:
        """One verdict line per file (the terminal's standard output)."""
        out: list[str] = []
        for report in self.files:
            named = f", named by {report.named_by}" if report.named_by else ""
            out.append(f"{report.path}: {report.kind}{named}: {report.verdict()}")
        return out

    def to_json(self) -> dict[str, Any]:
        return {"valid": self.exit_code == 0, "exit_code": self.exit_code,
                "files": [f.to_json() for f in self.files]}


def file_kind(document: Mapping[str, Any]) -> str:
    """``experiment``, ``playbook``, ``target configuration``, ``requirements`` or
    ``fault mix``."""
    keys = set(document)
    if "method" in keys or "steady-state-hypothesis" in keys:
        return "experiment"
    if "experiments" in keys or "draw" in keys:
        return "playbook"
    if keys and keys <= _TARGET_CONFIG_KEYS:
        return "target configuration"
    if "coverage" in keys and keys <= _REQUIREMENT_KEYS:
        return "requirements"
    if "categories" in keys and keys <= _FAULT_MIX_KEYS:
        return "fault mix"
    return "experiment"


def validate_files(paths: Sequence[Path], *, target: str | None = None,
                   variables: Mapping[str, str] | None = None) -> ValidationReport:
    """Validate each file (and what playbooks name), never stopping at an error."""
    report = ValidationReport()
    seen: set[tuple[Path, Path | None]] = set()
    for path in paths:
        _validate(path, report, seen, target=target, variables=dict(variables or {}),
                  named_by=None)
    return report


def _validate(path: Path, report: ValidationReport, seen: set[tuple[Path, Path | None]], *,
              target: str | None, variables: dict[str, str], named_by: Path | None) -> None:
    key = (path.absolute(), named_by)
    if key in seen:
        return
    seen.add(key)
    try:
        document, _ = read_document(path)
    except InvalidInput as exc:
        report.files.append(FileReport(path, "file", [str(exc)], named_by))
        return
    kind = file_kind(document)
    if kind == "experiment":
        _, errors = check_experiment(path, target=target, variables=variables)
        report.files.append(FileReport(path, kind, [str(e) for e in errors], named_by))
    elif kind == "playbook":
        _playbook(path, document, report, seen, variables)
    elif kind == "target configuration":
        from gameday.safety.targetconfig import load_target_config

        report.files.append(FileReport(path, kind, _first(load_target_config, path)))
    elif kind == "fault mix":
        from gameday.gamedays.faultmix import check_mix

        report.files.append(FileReport(path, kind, [str(e) for e in check_mix(path)[1]]))
    else:
        from gameday.gamedays.playbook import check_requirements

        report.files.append(FileReport(path, kind,
                                       [str(e) for e in check_requirements(path)[1]]))


def _first(load: Any, path: Path) -> list[str]:
    try:
        load(path)
    except InvalidInput as exc:
        return [str(exc)]
    return []


def _playbook(path: Path, document: Mapping[str, Any], report: ValidationReport,
              seen: set[tuple[Path, Path | None]], variables: dict[str, str]) -> None:
    """The playbook's own errors, then every experiment it names (listed first, then
    those of its fault mix), each with the playbook's target and variables."""
    from gameday.gamedays.faultmix import NamedExperimentInvalid
    from gameday.gamedays.playbook import check_playbook

    own = FileReport(path, "playbook")
    report.files.append(own)
    target = document.get("target") if isinstance(document.get("target"), str) else None
    shared = {**_plain(document.get("variables")), **variables}
    named: list[tuple[Path, dict[str, str]]] = []
    experiments = document.get("experiments")
    for item in experiments if isinstance(experiments, list) else []:
        if isinstance(item, Mapping) and isinstance(item.get("path"), str):
            named.append((_relative(path, item["path"]),
                          {**shared, **_plain(item.get("variables"))}))
    playbook, errors = check_playbook(path)
    # an experiment it lists that does not validate is reported with its own file
    own.errors.extend(str(e) for e in errors if not isinstance(e, NamedExperimentInvalid))
    if playbook is not None and playbook.draw is not None:
        for category in playbook.draw.mix.drawable:
            named.extend((e.path, dict(shared)) for e in category.experiments)
    for experiment, values in _unique(named):
        if experiment.is_file():
            _validate(experiment, report, seen, target=target, variables=values,
                      named_by=path)
    mine = [f for f in report.files if f.named_by == path]
    own.named = len(mine)
    own.named_failing = sum(1 for f in mine if f.errors)
    own.named_errors = sum(len(f.errors) for f in mine)


def _plain(value: Any) -> dict[str, str]:
    if not isinstance(value, Mapping):
        return {}
    return {str(k): str(v) for k, v in value.items() if not isinstance(v, dict | list)}


def _relative(playbook: Path, text: str) -> Path:
    candidate = Path(text)
    return candidate if candidate.is_absolute() else Path(os.path.normpath(playbook.parent /
                                                                          candidate))


def _unique(items: Iterable[tuple[Path, dict[str, str]]]) -> list[tuple[Path, dict[str, str]]]:
    found: dict[Path, dict[str, str]] = {}
    for path, values in items:
        found.setdefault(path, values)
    return list(found.items())
