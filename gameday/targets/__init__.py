"""Targets: where faults land (the lab, a host, a Kubernetes cluster) and what they land on."""
