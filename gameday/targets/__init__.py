"""Targets: where faults land (the lab, a host, a Kubernetes cluster) and what they land on."""

__all__ = ["TARGET_KINDS"]

#: The kinds of target a run can have (``none``: no target, nothing to inject into).
TARGET_KINDS = ("lab", "host", "kubernetes", "none")
