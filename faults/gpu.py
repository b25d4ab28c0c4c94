"""GPU fault actions (Chaos Toolkit activities).

Each action resolves its GPU selector on the run's target, checks the blast radius,
and injects through the node's agent under a lease; the run's ledger records every
fault so ``revert`` (and the runner, always) can undo it.
"""

from typing import Any

from gameday import activity
from gameday.bounded import no_cyclic_gc
from gameday.kinds.gpu import (
    GPU_ECC,
    GPU_FALL_OFF_BUS,
    GPU_MEMORY_LEAK,
    GPU_OOM,
    GPU_THERMAL,
    GPU_XID,
)

__all__ = ["ecc_error", "fall_off_bus", "memory_leak", "oom", "revert", "thermal_throttle",
           "xid_error"]


def ecc_error(gpu: dict[str, Any], kind: str = "double_bit", count: int = 1,
              xid: int | None = None, corrupt_weights: bool = False,
              lease_s: float | None = None) -> dict[str, Any]:
    """Inject ECC errors on the selected GPU(s).

    ``gpu`` selects the GPU: ``{holding_shard: 0}``, ``{node: node-0, index: 2}`` or
    ``{uuid: GPU-...}``. ``kind`` is ``single_bit`` or ``double_bit``; ``count`` errors are
    added to the GPU's volatile ECC counter; ``xid`` (48, 63, 64, 94 or 95) is reported
    with them; ``corrupt_weights`` silently corrupts the model weights the GPU holds (no
    counter moves when ``count`` is 0 — the controller cannot see it). The fault lasts
    until reverted or until its lease (``lease_s``, default the experiment's) lapses.

    Returns ``{"faults": [{"id", "gpu", "injected_at", "applied_at", "expires_at"}]}``.
    """
    params = activity.validated(GPU_ECC, {"kind": kind, "count": count, "xid": xid,
                                 "corrupt_weights": corrupt_weights})
    return _inject_on_gpus(GPU_ECC.name, "ecc_error", gpu, params, lease_s)


def oom(gpu: dict[str, Any], size_bytes: int | None = None, fraction: float | None = None,
        lease_s: float | None = None) -> dict[str, Any]:
    """Hold device memory on the selected GPU(s), so the workload there runs out of it.

    Give exactly one of ``size_bytes`` (how much to hold) or ``fraction`` (of the GPU's free
    memory, in (0, 1]). Asking for more than is free is refused before anything is held.
    In the lab the allocation is virtual (``DCGM_FI_DEV_FB_USED`` up) and the shard on the
    GPU fails its next allocation with "CUDA out of memory" and exits; on a host the
    agent really allocates it through the CUDA driver API (``injected_at: device``).
    Reverting frees it.

    Returns ``{"faults": [{"id", "gpu", "injected_at", "applied_at", "expires_at"}]}``.
    """
    params = activity.validated(GPU_OOM, {"size_bytes": size_bytes, "fraction": fraction})
    return _inject_on_gpus(GPU_OOM.name, "oom", gpu, params, lease_s)


def memory_leak(gpu: dict[str, Any], rate_bytes_per_s: int | None = None,
                rate_fraction_per_s: float | None = None, cap_bytes: int | None = None,
                cap_fraction: float = 1.0, tick_s: float = 0.5,
                lease_s: float | None = None) -> dict[str, Any]:
    """Leak device memory on the selected GPU(s): held memory grows every ``tick_s`` at
    ``rate_bytes_per_s`` (or ``rate_fraction_per_s`` of the free memory at the start)
    until ``cap_bytes`` (or ``cap_fraction`` of that free memory, default all of it) is
    held. In the lab the GPU's used memory rises (``DCGM_FI_DEV_FB_USED``) and the shard
    there fails its next allocation with "CUDA out of memory" once too little is free;
    on a host the agent really allocates through the CUDA driver API on a timer
    (``injected_at: device``). Reverting frees it all.

    Returns ``{"faults": [{"id", "gpu", "injected_at", "applied_at", "expires_at"}]}``.
    """
    params = activity.validated(GPU_MEMORY_LEAK, {
        "rate_bytes_per_s": rate_bytes_per_s, "rate_fraction_per_s": rate_fraction_per_s,
        "cap_bytes": cap_bytes, "cap_fraction": cap_fraction, "tick_s": tick_s})
    return _inject_on_gpus(GPU_MEMORY_LEAK.name, "memory_leak", gpu, params, lease_s)


def xid_error(gpu: dict[str, Any], xid: int, lease_s: float | None = None) -> dict[str, Any]:
    """Report an Xid on the selected GPU(s).

    ``xid`` is the NVIDIA Xid number (1..999). In the lab it becomes the GPU's last Xid
    (``DCGM_FI_DEV_XID_ERRORS``), and 48/79/94/95 stop the work on it; on a host the
    agent writes the driver's ``NVRM: Xid (PCI:...): N, ...`` line to the kernel log and,
    where DCGM runs, injects DCGM's Xid field. Reverting clears the Xid field (a kernel
    log line stays written).
    """
    params = activity.validated(GPU_XID, {"xid": xid})
    return _inject_on_gpus(GPU_XID.name, "xid_error", gpu, params, lease_s)


def thermal_throttle(gpu: dict[str, Any], temperature_c: float = 92.0,
                     clock_ratio: float = 0.5, reason: str = "hw_thermal",
                     allow_device_settings: bool = False,
                     lease_s: float | None = None) -> dict[str, Any]:
    """Make the selected GPU(s) hot and throttled.

    ``temperature_c`` is reported; the SM clock drops to ``clock_ratio`` of its maximum
    (in (0, 1]); ``reason`` sets the clocks-event reasons, ``sw_thermal`` (0x20) or
    ``hw_thermal`` (0x20 | 0x40). In the lab shards on the GPU answer slower by the clock
    ratio. On a host DCGM's temperature and clocks-event fields are injected
    (telemetry); with ``allow_device_settings: true`` (and the agent policy's
    ``gpu_device_settings``) the agent also really lowers the GPU's power limit through
    NVML, saved first and restored exactly on revert (``device-settings``); without DCGM
    it is refused unless ``allow_device_settings`` is true.
    """
    params = activity.validated(GPU_THERMAL, {"temperature_c": temperature_c,
                                     "clock_ratio": clock_ratio, "reason": reason,
                                     "allow_device_settings": allow_device_settings})
    return _inject_on_gpus(GPU_THERMAL.name, "thermal_throttle", gpu, params, lease_s)


def fall_off_bus(gpu: dict[str, Any], lease_s: float | None = None) -> dict[str, Any]:
    """Make the selected GPU(s) fall off the bus (Xid 79).

    In the lab the GPU leaves its node's inventory and metrics and the work on it fails
    until reverted; on a host the agent reports Xid 79 (kernel log line, DCGM's Xid
    field where DCGM runs) — a real GPU is never detached.
    """
    params = activity.validated(GPU_FALL_OFF_BUS, {})
    return _inject_on_gpus(GPU_FALL_OFF_BUS.name, "fall_off_bus", gpu, params, lease_s)


def revert() -> dict[str, Any]:
    """Revert every fault this run applied (idempotent); fails if any could not be reverted."""
    return activity.revert_all()


def _inject_on_gpus(kind: str, action: str, selector: dict[str, Any],
                    params: dict[str, Any], lease_s: float | None) -> dict[str, Any]:
    with activity.failing(), no_cyclic_gc():  # many GPUs: concurrently, all or nothing
        entries = activity.inject_on_gpus(kind, selector, params=params, action=action,
                                          lease_s=lease_s)
        # the answer too: a dict per GPU would set off the collector, to scan the fleet
        return {"faults": [{"id": entry.id, "gpu": f"{entry.node}/gpu{entry.target['gpu']}",
                            "injected_at": entry.injected_at, "applied_at": entry.applied_at,
                            "expires_at": entry.expires_at} for entry in entries]}
