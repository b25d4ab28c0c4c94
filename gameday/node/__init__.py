"""Node-side mechanisms: what an agent drives on its node (signals, cgroups, relays, the fault
filesystem, the host backend)."""
