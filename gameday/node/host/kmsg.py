"""Xid lines in the kernel log, as the NVIDIA driver writes them.

The driver reports an Xid as one kernel-log line, ``NVRM: Xid (PCI:0000:18:00): 79,
pid='<unknown>', name=<unknown>, GPU has fallen off the bus.``; dmesg, DCGM's health
watches and node problem detectors match on it. :func:`xid_line` formats one (ending in
``[gameday fault ID]``, so a human can tell an injected line from a real one) and
:class:`KernelLog` writes it, one record per write, to ``/dev/kmsg`` — or to any other
path (tests use a temporary file; never the real ``/dev/kmsg``).
"""

import os
from dataclasses import dataclass
from typing import Final

__all__ = ["DEV_KMSG", "XID_MESSAGES", "KernelLog", "pci_for_xid", "xid_line"]

DEV_KMSG: Final = "/dev/kmsg"
_LEVEL_ERR: Final = 3

#: What the driver says after the Xid number, for the common ones.
XID_MESSAGES: Final = {
    13: "Graphics SM Warp Exception on (GPC 0, TPC 0, SM 0): Out Of Range Address",
    31: "Ch 00000008, intr 00000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted "
        "@ 0x0_00000000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ",
    43: "Ch 00000008",
    45: "Ch 00000008",
    48: "An uncorrectable double bit error (DBE) has been detected on GPU in the "
        "framebuffer at partition 0, subpartition 0.",
    63: "Row Remapper: New row marked for remapping, reset gpu to activate.",
    64: "Row Remapper: Failed to remap a row.",
    74: "NVLink: fatal error detected on link 0",
    79: "GPU has fallen off the bus.",
    92: "High single-bit ECC error rate",
    94: "Contained: SM (0x1). RST: No, D-RST: No",
    95: "Uncontained: FBHUB. RST: Yes, D-RST: No",
    119: "Timeout after 6s of waiting for RPC response from GPU0 GSP!",
    120: "GSP task exception",
}


def pci_for_xid(pci_bus_id: str) -> str:
    """NVML's ``00000000:18:00.0`` as the driver prints it in an Xid: ``0000:18:00``."""
    parts = pci_bus_id.strip().lower().split(":")
    if len(parts) != 3 or "." not in parts[2]:
        raise ValueError(f"not a PCI bus id: {pci_bus_id!r}")
    domain, bus, device = parts[0][-4:].rjust(4, "0"), parts[1], parts[2].split(".")[0]
    return f"{domain}:{bus}:{device}"


def xid_line(pci_bus_id: str, xid: int, fault_id: str) -> str:
    """The driver's Xid line for ``xid`` on the GPU at ``pci_bus_id``, marked as injected."""
    message = XID_MESSAGES.get(xid, "Xid reported")
    return (f"NVRM: Xid (PCI:{pci_for_xid(pci_bus_id)}): {xid}, pid='<unknown>', "
            f"name=<unknown>, {message} [gameday fault {fault_id}]")


@dataclass(frozen=True)
class KernelLog:
    """Appends records to the kernel log at ``path`` (``/dev/kmsg``)."""

    path: str = DEV_KMSG

    def unavailable(self) -> str | None:
        if not os.path.exists(self.path):
            return f"{self.path} does not exist"
        if not os.access(self.path, os.W_OK):
            return f"{self.path} is not writable (the agent must run as root)"
        return None

    def write(self, line: str, level: int = _LEVEL_ERR) -> None:
        """One record: ``<level>line``; raises OSError if it cannot be written."""
        record = f"<{level}>{line}\n".encode()
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        try:
            os.write(fd, record)
        finally:
            os.close(fd)
