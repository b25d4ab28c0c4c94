"""Fault actions: Chaos Toolkit activities that inject faults through agents.

- ``faults.gpu``: ``ecc_error``, ``oom``, ``xid_error``, ``thermal_throttle``, ``fall_off_bus``;
- ``faults.net``: link flaps, loss and partitions; ``faults.service``: latency, timeouts;
- ``faults.storage``: stalls, errors, slow I/O; ``faults.process``: kill, pause;
- ``faults.node``: CPU and memory hogs; ``faults.k8s``: pod kill, cordon, drain, taint.

Each module also has ``revert`` (every fault of the run). Every kind is declared once in
:mod:`gameday.kinds` (its typed parameters; ``gameday faults`` lists them); see
``docs/faults.md``, and docs/extending.md for activities of your own.
"""

from typing import Any

__all__ = ["activity_modules", "discover"]


def activity_modules() -> tuple[str, ...]:
    """The modules of the catalogue's fault actions, in catalogue order."""
    from gameday.kinds import CATALOGUE

    return tuple(dict.fromkeys(kind.module for kind in CATALOGUE.values()))


def discover(discover_system: bool = True) -> dict[str, Any]:
    """The Chaos Toolkit discovery document (``chaos discover faults``): every fault
    action and its arguments."""
    from chaoslib.discovery.discover import discover_actions, initialize_discovery_result

    from gameday import __version__

    discovery: dict[str, Any] = initialize_discovery_result(
        "gameday-faults", __version__, "gameday")
    for module in activity_modules():
        discovery["activities"].extend(discover_actions(module))
    return discovery
