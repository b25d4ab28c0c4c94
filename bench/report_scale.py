"""Reports at scale: the coverage matrix and a gate verdict over 10,000 journals.

Writes N synthetic journals (the shape ``gameday run`` writes, ~9 KB each: toolkit runs, faults,
verifier results with RTO and re-shard measurements, timeline, verdict) spread over
every fault kind of the catalogue and every coverage layer, then times, from a cold
start of the reading code:

- ``coverage_s``: ``gameday.gamedays.coverage.build`` over the directory (read, SHA-256 and
  summarize every file) plus a Markdown and a JSON rendering with requirements checked;
- ``gate_s``: reading and summarizing the same journals as a playbook run's results,
  then ``gameday.gamedays.gate.evaluate`` with every threshold set, the JUnit XML and the
  Markdown summary.

Last line: ``report_scale: journals=10000 coverage_s=… gate_s=…`` (goal <= 5 s each).
"""

import argparse
import datetime
import random
import tempfile
import time
from pathlib import Path
from typing import Any

from gameday.evidence.journal import encode
from gameday.evidence.summary import read_summary
from gameday.experiment.extension import COVERAGE_LAYERS
from gameday.gamedays import coverage
from gameday.gamedays.gate import evaluate, junit_xml, markdown_summary
from gameday.gamedays.play import ExperimentRun
from gameday.gamedays.playbook import Gate, PlannedExperiment, Playbook, Requirement
from gameday.kinds import CATALOGUE

GOAL_S = 5.0


def synthetic_journal(rng: random.Random, index: int) -> dict[str, Any]:
    kinds = sorted(CATALOGUE)
    fault = kinds[index % len(kinds)]
    layer = (CATALOGUE[fault].coverage_layer if rng.random() < 0.8
             else rng.choice(COVERAGE_LAYERS))
    passed = rng.random() < 0.9
    onset = 1_790_000_000.0 + index * 600
    rto = round(rng.lognormvariate(0.5, 0.6), 3)
    end = datetime.datetime.fromtimestamp(onset + 12, datetime.UTC).isoformat()
    verifiers = [
        {"verifier": "steady.http_latency_ok", "name": "p99-latency", "passed": True,
         "reason": "p99 latency 5.4 ms <= 250 ms (20 samples)", "at": onset - 1,
         "measurement": {"p99_ms": 5.4, "bound_ms": 250, "samples": 20}},
        {"verifier": "rto.measure_recovery", "name": "recovered-within-rto",
         "passed": passed, "reason": f"rto {rto} s <= slo 20 s", "at": onset + 8,
         "measurement": {"onset": onset, "detected_at": onset + 0.01,
                         "recovered_at": onset + rto, "rto_s": rto, "slo_s": 20.0,
                         "met": passed, "samples": 80, "failures": 12,
                         "timeline": [[onset + 0.01, False], [onset + rto, True],
                                      [onset + rto + 3, True]]}},
        {"verifier": "reshard.verify_reshard", "name": "shard-moved", "passed": passed,
         "reason": "re-sharded", "at": onset + 8.1,
         "measurement": {"time_to_detect_s": round(rto * 0.6, 3),
                         "time_to_reshard_s": round(rto * 0.9, 3),
                         "moves": [{"shard": 0, "from": "node-0/gpu0", "to": "node-0/gpu3",
                                    "at": onset + rto * 0.9}]}},
        {"verifier": "prediction_hash.matches_golden", "name": "predictions-match-golden",
         "passed": True, "reason": "predictions match golden sha256 0cc96aeb37ab…",
         "at": onset + 9, "measurement": {"digest": "0cc96aeb" * 8, "rows": 32}},
    ]
    runs = [{"activity": {"type": "probe" if i else "action", "name": v["name"],
                          "provider": {"type": "python", "module": v["verifier"].split(".")[0],
                                       "func": v["verifier"].split(".")[1],
                                       "arguments": {"url": "http://127.0.0.1:8080/predict",
                                                     "stable_for_s": 3}}},
             "status": "succeeded", "start": end, "end": end, "duration": 1.5,
             "output": v["measurement"]} for i, v in enumerate(verifiers)]
    return {
        "chaoslib-version": "1.44.0", "run": runs,
        "steady_states": {"before": {"steady_state_met": True, "probes": runs[:1]},
                          "after": {"steady_state_met": True, "probes": runs[:1]}},
        "status": "completed" if passed else "failed",
        "start": datetime.datetime.fromtimestamp(onset - 2, datetime.UTC).isoformat(),
        "end": end, "duration": 14.0,
        "experiment": {"title": f"synthetic {fault} scenario {index % 37}",
                       "description": "synthetic journal for the report bench"},
        "gameday": {
            "version": 1, "run_id": f"{index:012x}", "target": "lab",
            "experiment_file": f"experiments/{fault.replace('.', '-')}-{index % 37}.yaml",
            "extension": {"coverage": {"fault": fault, "layer": layer},
                          "slo": {"rto_s": 20.0, "rpo_steps": None}},
            "faults": [{"id": f"f-{index}", "kind": fault, "node": "node-0",
                        "target": {"gpu": 0}, "injected_at": "virtual", "applied_at": onset,
                        "reverted_at": onset + 10, "revert_reason": "requested"}],
            "verifiers": verifiers,
            "timeline": [{"t": onset, "event": "fault_applied", "kind": fault},
                         {"t": onset + 10, "event": "fault_reverted", "kind": fault}],
            "verdict": {"passed": passed, "exit_code": 0 if passed else 1,
                        "status": "completed" if passed else "failed",
                        "reasons": [] if passed else ["verifier 'recovered-within-rto' "
                                                      "failed: rto 23.4 s > slo 20 s"]},
            "environment": {"host": "bench", "python": "3.11"},
        },
    }


def write_journals(directory: Path, count: int, seed: int) -> int:
    rng = random.Random(seed)
    size = 0
    for index in range(count):
        data = encode(synthetic_journal(rng, index))
        size += len(data)
        (directory / f"{index:05d}.json").write_bytes(data)
    return size


def time_coverage(directory: Path) -> tuple[float, coverage.Matrix]:
    requirements = [Requirement(fault, CATALOGUE[fault].coverage_layer, 5)
                    for fault in sorted(CATALOGUE)]
    start = time.perf_counter()
    matrix = coverage.build(directory)
    matrix.check(requirements)
    coverage.to_markdown(matrix)
    coverage.to_json(matrix)
    return time.perf_counter() - start, matrix


def time_gate(directory: Path) -> tuple[float, int]:
    playbook = Playbook(path=Path("bench.yaml"), title="bench gate", description="",
                        experiments=[], gate=Gate(rto_max_s=20, rto_p95_s=10, reshard_max_s=20,
                                                  detect_max_s=20, min_ettr=0.99,
                                                  min_pass_rate=0.5))
    start = time.perf_counter()
    runs = []
    for path in sorted(directory.glob("*.json")):
        summary = read_summary(path)
        planned = PlannedExperiment(path.stem, Path(summary.experiment_file))
        runs.append(ExperimentRun(planned, summary.exit_code, path, summary))
    verdict = evaluate(playbook, runs)
    junit_xml(verdict)
    markdown_summary(verdict, runs)
    return time.perf_counter() - start, len(verdict.cases)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--journals", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="gdrep-bench-") as tmp:
        directory = Path(tmp)
        size = write_journals(directory, args.journals, args.seed)
        coverage_s, matrix = time_coverage(directory)
        gate_s, cases = time_gate(directory)
    print(f"journals: {args.journals} ({size / 1e6:.1f} MB, {size / args.journals / 1e3:.1f} KB "
          f"each)")
    print(f"coverage: {len(matrix.cells)} cells, {len(matrix.findings)} unmet requirements, "
          f"{coverage_s / args.journals * 1e6:.0f} us/journal, {coverage_s / GOAL_S:.2f} of the "
          f"{GOAL_S:g} s goal")
    print(f"gate: {cases} testcases, {gate_s / args.journals * 1e6:.0f} us/journal, "
          f"{gate_s / GOAL_S:.2f} of the {GOAL_S:g} s goal")
    print(f"report_scale: journals={args.journals} coverage_s={coverage_s:.2f} "
          f"gate_s={gate_s:.2f}")


if __name__ == "__main__":
    main()
