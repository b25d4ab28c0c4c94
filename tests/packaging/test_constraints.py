"""constraints.txt pins exactly what the extras install: every distribution of
``gameday[dev,workloads]`` (the closure over the installed distributions' requirements)
once, at one exact version that each of pyproject.toml's requirements accepts."""

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.packaging.extras import REPO, distributions, project


def _pins() -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in (REPO / "constraints.txt").read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        name, separator, version = line.partition("==")
        assert separator and version and ";" not in version, f"not an exact pin: {line!r}"
        key = canonicalize_name(name)
        assert key not in pins, f"pinned twice: {name}"
        pins[key] = version
    return pins


def test_every_distribution_the_extras_install_is_pinned() -> None:
    missing = distributions("dev", "workloads") - set(_pins())
    assert not missing, f"not in constraints.txt (run make constraints): {sorted(missing)}"


def test_every_pin_satisfies_pyproject() -> None:
    pins = _pins()
    table = project()
    optional = table["optional-dependencies"]
    base = table["dependencies"]
    assert isinstance(optional, dict) and isinstance(base, list)
    for line in [*base, *(line for lines in optional.values() for line in lines)]:
        requirement = Requirement(line)
        name = canonicalize_name(requirement.name)
        if name == "gameday":
            continue
        assert name in pins, f"{line} is not pinned"
        assert requirement.specifier.contains(pins[name], prereleases=True), (
            f"constraints.txt pins {name}=={pins[name]}, pyproject.toml asks {line}")
