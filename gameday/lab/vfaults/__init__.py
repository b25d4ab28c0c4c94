"""The fault kinds of the lab's virtual backend, one small object per kind."""

from collections.abc import Mapping
from typing import Final

from gameday.lab.vfaults.base import GpuChange, GrowingChange, VirtualFault, is_growing
from gameday.lab.vfaults.bus import FallOffBusFault
from gameday.lab.vfaults.ecc import EccFault
from gameday.lab.vfaults.leak import LeakFault
from gameday.lab.vfaults.oom import OomFault
from gameday.lab.vfaults.thermal import ThermalFault
from gameday.lab.vfaults.xid import XidFault

__all__ = ["VIRTUAL_FAULTS", "GpuChange", "GrowingChange", "VirtualFault", "is_growing"]

#: Every kind the virtual backend applies, by name.
VIRTUAL_FAULTS: Final[Mapping[str, VirtualFault]] = {
    fault.kind: fault for fault in (EccFault(), OomFault(), LeakFault(), XidFault(),
                                    ThermalFault(), FallOffBusFault())
}
