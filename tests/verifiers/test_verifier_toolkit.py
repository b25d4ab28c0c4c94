"""The verifiers as the Chaos Toolkit sees them: discovery, validation and a real run of an
experiment (chaoslib in-process) against the test servers, with the fault onset recorded
in the session as a fault action would have."""

from typing import Any

import pytest
from chaoslib.experiment import ensure_experiment_is_valid, run_experiment

import verifiers
from gameday.engine.session import deactivate
from gameday.targets.base import Target
from tests.verifiers.verifier_helpers import (
    FAULT_HOOKS,
    ModelServer,
    PlacementServer,
    new_session,
    placement_document,
    shard,
)


def probe(name: str, module: str, func: str, tolerance: Any = None,
          **arguments: Any) -> dict[str, Any]:
    activity: dict[str, Any] = {
        "type": "probe", "name": name,
        "provider": {"type": "python", "module": f"verifiers.{module}", "func": func,
                     "arguments": arguments}}
    if tolerance is not None:
        activity["tolerance"] = tolerance
    return activity


def experiment(model_url: str) -> dict[str, Any]:
    return {
        "version": "1.0.0",
        "title": "shard 0 moves off a bad GPU without wrong answers",
        "description": "verifiers, and a simulated fault that only records its onset",
        "configuration": {"service_url": model_url},
        "steady-state-hypothesis": {
            "title": "fast and correct",
            "probes": [
                probe("p99", "steady", "http_latency_ok", True,
                      url="${service_url}/predict", p99_ms=2000, samples=5),
                probe("golden", "prediction_hash", "matches_golden", True,
                      endpoint="${service_url}/predict", golden="capture"),
            ]},
        "method": [
            {"type": "action", "name": "fault",
             "provider": {"type": "python", "module": "tests.verifiers.verifier_helpers",
                          "func": "simulated_fault", "arguments": {"node": "node-0", "gpu": 0}}},
            probe("rto", "rto", "measure_recovery",
                  sli={"http": "${service_url}/predict"}, stable_for_s=0.3, interval_s=0.05,
                  timeout_s=10),
            probe("reshard", "reshard", "verify_reshard", placement="lab",
                  same_nvlink_domain="preferred", timeout_s=5, interval_s=0.05),
        ],
    }


def test_discovery_lists_every_verifier() -> None:
    names = {(a["mod"], a["name"]) for a in verifiers.discover()["activities"]}
    assert names == {
        ("verifiers.steady", "http_latency_ok"), ("verifiers.steady", "prometheus_query_ok"),
        ("verifiers.rto", "measure_recovery"),
        ("verifiers.rpo", "checkpoint_loss"), ("verifiers.rpo", "stream_loss"),
        ("verifiers.prediction_hash", "matches_golden"),
        ("verifiers.prediction_hash", "verify_predictions"),
        ("verifiers.prediction_hash", "save_golden"),
        ("verifiers.reshard", "verify_reshard"),
        ("verifiers.replacement", "verify_replacement"),
        ("verifiers.throughput", "degradation")}


def test_chaoslib_validates_the_arguments() -> None:
    ensure_experiment_is_valid(experiment("http://127.0.0.1:1"))
    broken = experiment("http://127.0.0.1:1")
    broken["method"][1]["provider"]["arguments"]["stable_for"] = 3
    with pytest.raises(Exception, match="'stable_for' is not part of the function signature "
                                        "in activity 'measure_recovery'"):
        ensure_experiment_is_valid(broken)


@pytest.fixture
def placement() -> Any:
    server = PlacementServer(placement_document([shard(0, "node-0", 0), shard(1, "node-1", 0)]))
    yield server
    server.close()


def test_a_run_measures_and_then_deviates_on_wrong_answers(model: ModelServer,
                                                           placement: PlacementServer) -> None:
    session = new_session(target=Target(kind="lab", placement_url=placement.placement_url),
                          rto_s=5)

    def misbehave(onset: float) -> None:
        model.fail_window = (onset, onset + 0.5)
        placement.then(onset + 0.6, placement_document(
            [shard(0, "node-0", 1), shard(1, "node-1", 0)], cordoned=("node-0", 0), events=[
                {"t": onset + 0.2, "type": "gpu_cordoned", "node": "node-0", "gpu": 0},
                {"t": onset + 0.4, "type": "shard_moved", "node": "node-0", "gpu": 0,
                 "shard": 0, "to": {"node": "node-0", "gpu": 1}}]))

    FAULT_HOOKS.append(misbehave)
    try:
        journal = run_experiment(experiment(model.url), settings={})
        assert journal["status"] == "completed", journal
        assert journal["steady_states"]["before"]["steady_state_met"] is True
        assert journal["steady_states"]["after"]["steady_state_met"] is True
        fault, rto, reshard = (run["output"] for run in journal["run"])
        assert rto["onset"] == fault["applied_at"]
        assert rto["met"] is True and rto["detected_at"] is not None
        # the outage lasted 0.5 s; the estimate is good to its stated resolution
        assert 0.5 - rto["rto_resolution_s"] <= rto["rto_s"] < 2.0
        assert reshard["time_to_reshard_s"] == 0.4
        assert [r.verifier for r in session.results] == [
            "steady.http_latency_ok", "prediction_hash.matches_golden",
            "rto.measure_recovery", "reshard.verify_reshard",
            "steady.http_latency_ok", "prediction_hash.matches_golden"]

        FAULT_HOOKS.clear()
        model.corrupt = (5, 0.25)  # the same run again: the captured golden now differs
        journal = run_experiment(experiment(model.url), settings={})
        assert journal["steady_states"]["before"]["steady_state_met"] is False
        failed = journal["steady_states"]["before"]["probes"][1]
        assert failed["status"] == "failed"
        assert "(first difference at output index 5, max abs error 0.25)" in \
            failed["exception"][-1]
    finally:
        FAULT_HOOKS.clear()
        deactivate()
