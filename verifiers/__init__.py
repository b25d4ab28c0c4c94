"""Verifier probes: Chaos Toolkit probes that measure, never inject.

- ``verifiers.steady``: ``http_latency_ok``, ``prometheus_query_ok`` (steady state);
- ``verifiers.rto``: ``measure_recovery`` (time to detect, time to recover, RTO);
- ``verifiers.rpo``: ``checkpoint_loss``, ``stream_loss`` (work lost: RPO);
- ``verifiers.prediction_hash``: ``matches_golden``, ``verify_predictions``, ``save_golden``;
- ``verifiers.throughput``: ``degradation`` (the throughput a fault cost while the job
  stayed up: slowdown, time back to pace, work lost);
- ``verifiers.reshard``: ``verify_reshard`` (self-healing re-shard off a faulted GPU);
- ``verifiers.replacement``: ``verify_replacement`` (self-healing as any controller does
  it: the faulted replica, pod or process replaced by a new healthy one).

Each records a ``gameday.engine.verifier_result.VerifierResult`` in the run session and signals a
missed objective by raising ``chaoslib.exceptions.ActivityFailed`` with one line.
See ``docs/verifiers.md``.
"""

from typing import Any

__all__ = ["ACTIVITY_MODULES", "discover"]

ACTIVITY_MODULES = ("verifiers.steady", "verifiers.rto", "verifiers.rpo",
                    "verifiers.prediction_hash", "verifiers.reshard",
                    "verifiers.replacement", "verifiers.throughput")


def discover(discover_system: bool = True) -> dict[str, Any]:
    """The Chaos Toolkit discovery document: every verifier probe and its arguments."""
    from chaoslib.discovery.discover import discover_probes, initialize_discovery_result

    from gameday import __version__

    discovery: dict[str, Any] = initialize_discovery_result(
        "gameday-verifiers", __version__, "gameday")
    for module in ACTIVITY_MODULES:
        discovery["activities"].extend(discover_probes(module))
    return discovery
