"""Targets: where faults land (the lab, a host, a Kubernetes cluster) and what they land on."""

__all__ = ["TARGET_KINDS", "gpu_label"]

#: The kinds of target a run can have (``none``: no target, nothing to inject into).
TARGET_KINDS = ("lab", "host", "kubernetes", "none")


def gpu_label(node: object, index: object) -> str:
    """How a GPU is named to people everywhere (runs, reports, the lab): ``node-0/gpu2``."""
    return f"{node}/gpu{index}"
