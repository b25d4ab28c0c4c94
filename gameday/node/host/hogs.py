"""Real node hogs on a host: ``node.cpu_hog`` and ``node.memory_hog`` in cgroups of their
own (v1 or v2, whichever has the controller), with stress-ng when installed.

Unavailable, with the reason, where the host has no cpu (or memory) controller that
gameday can use; see :mod:`gameday.node.hogs`.
"""

from typing import Any

from gameday.node.hogs import HOG_KINDS, HogFault
from gameday.node.host.base import HostFault

__all__ = ["HostHogFault", "handlers"]


class HostHogFault(HogFault):
    """A hog on this host (cgroups at the hierarchy roots, named ``gameday-…-ID``)."""

    def inventory(self) -> dict[str, list[dict[str, Any]]]:
        return {}


def handlers() -> list[HostFault]:
    return [HostHogFault(kind) for kind in HOG_KINDS]
