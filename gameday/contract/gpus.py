"""How a GPU is named, the same in runs, reports, verifiers and the lab: the lab's
placement endpoint and a run's ledger name GPUs alike, so a verifier can compare them."""

__all__ = ["gpu_label"]


def gpu_label(node: object, index: object) -> str:
    """How a GPU is named to people everywhere (runs, reports, the lab): ``node-0/gpu2``."""
    return f"{node}/gpu{index}"
