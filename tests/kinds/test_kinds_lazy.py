"""The catalogue loads a family's declarations when one of its kinds is looked up, and
still lists every kind.

:data:`gameday.kinds.catalogue.FAMILIES` is the one list of the built-in families; a
family ``gpu`` declares its kinds in ``gameday.kinds.gpu`` (``KINDS``), names them
``gpu.*`` and injects them through ``faults.gpu``, which is how a name or an activity
finds its family without loading the others.
"""

import importlib
import json
import pkgutil
import subprocess
import sys

import pytest

import gameday.kinds
from gameday.kinds import CATALOGUE, by_activity, lookup
from gameday.kinds.catalogue import FAMILIES
from tests.conftest import REPO


def _declaring_modules() -> dict[str, list[str]]:
    """Every module of gameday/kinds/ that declares kinds (has ``KINDS``), found on disk
    rather than through :data:`FAMILIES`: its name and its kinds' names."""
    found = {}
    for info in pkgutil.iter_modules(gameday.kinds.__path__):
        module = importlib.import_module(f"gameday.kinds.{info.name}")
        if hasattr(module, "KINDS"):
            found[info.name] = [kind.name for kind in module.KINDS]
    return found


def test_the_catalogue_lists_every_declared_kind_in_family_order() -> None:
    declared = _declaring_modules()
    assert set(declared) == set(FAMILIES)
    assert list(CATALOGUE) == [name for family in FAMILIES for name in declared[family]]
    assert len(CATALOGUE) == len(set(CATALOGUE)) == sum(map(len, declared.values()))


@pytest.mark.parametrize("family", FAMILIES)
def test_a_family_names_its_kinds_and_activities_after_itself(family: str) -> None:
    for kind in importlib.import_module(f"gameday.kinds.{family}").KINDS:
        assert kind.name.startswith(f"{family}."), kind.name
        assert kind.module == f"faults.{family}", (kind.name, kind.module)


def test_lookups_find_every_kind_and_nothing_else() -> None:
    for name, kind in CATALOGUE.items():
        assert lookup(name) is kind and CATALOGUE[name] is kind and name in CATALOGUE
        assert by_activity(kind.module, kind.func) is kind
    for name in ("gpu.nope", "nope", "", ".", "gpu", "faults.gpu.ecc"):
        assert lookup(name) is None and CATALOGUE.get(name) is None and name not in CATALOGUE
    for module, func in (("os.path", "isdir"), ("faults.gpu", "nope"), ("faults", "gpu"),
                         ("faults.gpu.x", "ecc_error"), ("gameday.kinds.gpu", "ecc_error")):
        assert by_activity(module, func) is None
    with pytest.raises(KeyError):
        CATALOGUE["gpu.nope"]


LOADED = """
import json, sys
from gameday.kinds import CATALOGUE, by_activity, lookup
looked = [by_activity("os.path", "isdir"), lookup("nope"), CATALOGUE.get("x.y")]
before = sorted(m for m in sys.modules if m.startswith("gameday.kinds."))
assert lookup(sys.argv[1]) is not None
after = sorted(m for m in sys.modules if m.startswith("gameday.kinds."))
print(json.dumps({"looked": looked, "before": before, "after": after}))
"""


def test_looking_up_a_kind_imports_its_family_alone() -> None:
    result = subprocess.run([sys.executable, "-c", LOADED, "net.loss"], cwd=REPO, text=True,
                            capture_output=True, check=True, timeout=60)
    loaded = json.loads(result.stdout)
    assert loaded["looked"] == [None, None, None]
    core = {"gameday.kinds.catalogue", "gameday.kinds.params", "gameday.kinds.selectors",
            "gameday.kinds.spec"}
    assert set(loaded["before"]) == core
    assert set(loaded["after"]) == core | {"gameday.kinds.net"}
