"""The node agent: applies faults through a backend, under leases."""
