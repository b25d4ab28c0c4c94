"""faults.discover(): the Chaos Toolkit discovery document of the fault actions."""

from chaoslib.discovery.package import get_discover_function

import faults
from gameday.kinds import CATALOGUE


def test_discovery_lists_every_catalogued_action_and_those_that_undo() -> None:
    document = faults.discover()
    found = {(a["mod"], a["name"]) for a in document["activities"]}
    catalogued = {(kind.module, kind.func) for kind in CATALOGUE.values()}
    reverts = {(module, "revert") for module in faults.activity_modules()}
    undoing = {("faults.storage", "revert_storage"), ("faults.process", "resume")}
    assert found == catalogued | reverts | undoing  # undoing: actions that end a fault early
    assert {a["type"] for a in document["activities"]} == {"action"}
    assert document["extension"]["name"] == "gameday-faults"


def test_the_toolkit_finds_the_discover_function() -> None:
    assert get_discover_function(faults) is faults.discover
