"""What an extra of pyproject.toml installs, read from the file and from the metadata of
the distributions installed here: the closure of its requirements (markers evaluated,
the project's own extras followed), and the top-level modules those distributions
provide."""

import sys
import tomllib
from functools import cache
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[2]
PROJECT = "gameday"
OURS = frozenset({"gameday", "faults", "verifiers"})
#: What every virtual environment starts with.
VENV_DEFAULTS = frozenset({"pip", "setuptools", "_distutils_hack", "pkg_resources"})


@cache
def project() -> dict[str, object]:
    """The ``[project]`` table of pyproject.toml."""
    document = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    table: dict[str, object] = document["project"]
    return table


def _own(extras: frozenset[str]) -> list[Requirement]:
    """The requirements of the project with ``extras``, its own extras expanded."""
    table = project()
    optional = table["optional-dependencies"]
    assert isinstance(optional, dict)
    base = table["dependencies"]
    assert isinstance(base, list)
    found: list[Requirement] = [Requirement(line) for line in base]
    todo, seen = list(extras), set[str]()
    while todo:
        extra = todo.pop()
        if extra in seen:
            continue
        seen.add(extra)
        for line in optional[extra]:
            requirement = Requirement(line)
            if canonicalize_name(requirement.name) == PROJECT:
                todo.extend(requirement.extras)
            else:
                found.append(requirement)
    return found


def distributions(*extras: str) -> frozenset[str]:
    """The canonical names of every distribution ``gameday[extras]`` installs (the
    closure over the installed distributions' own requirements)."""
    todo = [(r, frozenset[str]()) for r in _own(frozenset(extras))]
    names: set[str] = set()
    while todo:
        requirement, wanted = todo.pop()
        if requirement.marker is not None and not any(
                requirement.marker.evaluate({"extra": extra})
                for extra in (wanted or {""})):
            continue
        name = canonicalize_name(requirement.name)
        key = name + "[" + ",".join(sorted(requirement.extras)) + "]"
        if key in names:
            continue
        names.add(key)
        try:
            requires = metadata.distribution(name).requires or []
        except metadata.PackageNotFoundError:
            continue
        todo.extend((Requirement(line), frozenset(requirement.extras)) for line in requires)
    return frozenset(key.partition("[")[0] for key in names)


def modules_not_installed_by(*extras: str) -> frozenset[str]:
    """The top-level modules installed here that ``gameday[extras]`` would not install
    (nor the standard library, nor the project itself)."""
    installed = distributions(*extras)
    return frozenset(
        module for module, owners in metadata.packages_distributions().items()
        if module not in OURS | VENV_DEFAULTS and module not in sys.stdlib_module_names
        and module.isidentifier() and not module.startswith("__editable__")
        and not {canonicalize_name(owner) for owner in owners} & installed)
