"""Reports at scale: the coverage matrix and a gate verdict over 10,000 verified journals.

Writes N synthetic journals (the shape ``gameday run`` writes, ~9 KB each: toolkit runs, faults,
verifier results with RTO and re-shard measurements, timeline, verdict) spread over
every fault kind of the catalogue and every coverage layer, as one hash chain with every
journal and the head signed, then times with the trusted public key:

- ``coverage``: ``gameday.gamedays.coverage.build`` over the directory (verify the chain and
  every signature, summarize every file) plus a Markdown and a JSON rendering with
  requirements checked;
- ``gate``: ``gate --journals`` over the same directory (verify, pick each experiment's
  newest journal) with every threshold set, the JUnit XML and the Markdown summary;
- ``score``: ``gameday score --require`` (verify, score, its JSON with every point);

each three ways: verifying every journal (no index), with a verified index that does not
exist yet (cold: it is built) and with that index (warm: only the stamps, the links and
the head are checked; the fastest of ``--repeat`` runs); the score without an index and
with the warm one. Goals:
coverage and gate warm <= 1 s each, score <= 5 s.

Last line: ``report_scale: journals=10000 coverage_s=… coverage_cold_s=… coverage_warm_s=…
gate_s=… gate_cold_s=… gate_warm_s=… score_s=… score_warm_s=…``.
"""

import argparse
import datetime
import hashlib
import json
import os
import random
import tempfile
import time
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)

from gameday.evidence import checked, signing
from gameday.evidence.index import RACY_S, VerifiedIndex
from gameday.evidence.journal import CHAIN_FILE, ChainHead, encode
from gameday.experiment.extension import COVERAGE_LAYERS
from gameday.gamedays import coverage, score
from gameday.gamedays.gate import evaluate, junit_xml, markdown_summary, runs_from_journals
from gameday.gamedays.playbook import Gate, PlannedExperiment, Playbook, Requirement
from gameday.kinds import CATALOGUE

WARM_GOAL_S = 1.0
SCORE_GOAL_S = 5.0


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


def write_journals(directory: Path, count: int, seed: int,
                   key: Ed25519PrivateKey | None = None) -> int:
    """Write ``count`` journals as one hash chain, signed with ``key``: the bytes
    ``gameday.evidence.journal.write_journal`` writes (chain link, sequence, signature,
    signed head), without its per-journal fsyncs, which would time the disk."""
    rng = random.Random(seed)
    size = 0
    head: ChainHead | None = None
    for index in range(count):
        journal = synthetic_journal(rng, index)
        section = journal["gameday"]
        section["previous_sha256"] = head.sha256 if head else None
        section["previous_journal"] = head.journal if head else None
        section["sequence"] = index + 1
        if key is not None:
            section["signature"] = signing.declaration(key)
        data = encode(journal)
        size += len(data)
        path = directory / f"{index:05d}.json"
        path.write_bytes(data)
        if key is not None:
            signing.signature_path(path).write_bytes(signing.sign(key, data))
        head = ChainHead(hashlib.sha256(data).hexdigest(), path.name, index + 1)
    if head is not None:
        signed = signing.sign(key, head.payload()) if key is not None else None
        (directory / CHAIN_FILE).write_bytes(
            ChainHead(head.sha256, head.journal, head.sequence, signed).encode())
    return size


REQUIREMENTS = [Requirement(fault, CATALOGUE[fault].coverage_layer, 5)
                for fault in sorted(CATALOGUE)]


def time_coverage(directory: Path, trusted: Ed25519PublicKey | None,
                  index: Path | None) -> tuple[float, coverage.Matrix]:
    """Verify, read, check requirements, render Markdown and JSON (one ``coverage``)."""
    start = time.perf_counter()
    opened = VerifiedIndex.open(index, trusted) if index is not None else None
    matrix = coverage.build(directory, trusted=trusted, index=opened)
    matrix.check(REQUIREMENTS)
    coverage.to_markdown(matrix)
    coverage.to_json(matrix)
    elapsed = time.perf_counter() - start
    if matrix.rejected or matrix.chain_problems:
        raise SystemExit(f"report_scale: the bench's own journals did not verify: "
                         f"{(matrix.chain_problems or [matrix.rejected[0].reason])[0]}")
    return elapsed, matrix


def bench_playbook(directory: Path) -> Playbook:
    """A gate over every experiment the journals ran, every threshold set."""
    files = sorted({json.loads(p.read_bytes())["gameday"]["experiment_file"]
                    for p in directory.glob("*.json")})
    return Playbook(path=Path("bench.yaml"), title="bench gate", description="",
                    experiments=[PlannedExperiment(Path(f).stem, Path(f)) for f in files],
                    gate=Gate(rto_max_s=20, rto_p95_s=10, reshard_max_s=20, detect_max_s=20,
                              min_ettr=0.99, min_pass_rate=0.5))


def time_gate(directory: Path, playbook: Playbook, trusted: Ed25519PublicKey | None,
              index: Path | None) -> tuple[float, int]:
    """``gate --journals``: verify, pick each experiment's newest journal, judge, write
    the JUnit XML and the Markdown summary."""
    start = time.perf_counter()
    opened = VerifiedIndex.open(index, trusted) if index is not None else None
    evidence = runs_from_journals(playbook, directory, trusted, opened)
    verdict = evaluate(playbook, evidence.runs, evidence)
    junit_xml(verdict)
    markdown_summary(verdict, evidence.runs)
    elapsed = time.perf_counter() - start
    if evidence.rejected or evidence.problems:
        raise SystemExit("report_scale: the gate rejected the bench's own journals")
    return elapsed, len(verdict.cases)


def time_score(directory: Path, trusted: Ed25519PublicKey | None,
               index: Path | None) -> tuple[float, float | None]:
    """``gameday score --require``: verify, score every service, cell and the whole,
    render its JSON (every point with its journal hash)."""
    start = time.perf_counter()
    opened = VerifiedIndex.open(index, trusted) if index is not None else None
    evidence = checked.check(directory, trusted, opened)
    result = score.compute([summary for _, summary in evidence.verified],
                           rejected=[(str(j.path), str(j.problem)) for j in evidence.rejected],
                           requirements=REQUIREMENTS, now=time.time())
    json.dumps(result.to_json())
    return time.perf_counter() - start, result.overall.value


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--journals", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--repeat", type=int, default=3,
                        help="warm runs to time; the fastest is reported (default 3), as a "
                             "loaded machine only ever adds time")
    args = parser.parse_args()
    key = Ed25519PrivateKey.generate()
    trusted = key.public_key()
    with tempfile.TemporaryDirectory(prefix="gdrep-bench-") as tmp:
        directory = Path(tmp) / "journals"
        directory.mkdir()
        size = write_journals(directory, args.journals, args.seed, key)
        # the index must be older than RACY_S to be kept: age the files as time would
        old = time.time() - 3600
        for path in directory.iterdir():
            os.utime(path, (old, old))
        time.sleep(RACY_S)
        index = Path(tmp) / "index.json"
        playbook = bench_playbook(directory)
        full_s, matrix = time_coverage(directory, trusted, None)
        cold_s, _ = time_coverage(directory, trusted, index)
        warm_s = min(time_coverage(directory, trusted, index)[0] for _ in range(args.repeat))
        gate_full_s, cases = time_gate(directory, playbook, trusted, None)
        gate_index = Path(tmp) / "gate-index.json"
        gate_cold_s, _ = time_gate(directory, playbook, trusted, gate_index)
        gate_warm_s = min(time_gate(directory, playbook, trusted, gate_index)[0]
                          for _ in range(args.repeat))
        score_s, overall = time_score(directory, trusted, None)
        score_warm_s = min(time_score(directory, trusted, index)[0]
                           for _ in range(args.repeat))
        index_mb = index.stat().st_size / 1e6
    print(f"journals: {args.journals} ({size / 1e6:.1f} MB, {size / args.journals / 1e3:.1f} KB "
          f"each), one hash chain, every journal and the head signed; index {index_mb:.1f} MB")
    print(f"coverage: {len(matrix.cells)} cells, {len(matrix.findings)} unmet requirements; "
          f"verifying every journal {full_s:.2f} s, index cold {cold_s:.2f} s, warm "
          f"{warm_s:.2f} s ({warm_s / WARM_GOAL_S:.2f} of the {WARM_GOAL_S:g} s goal, "
          f"{full_s / warm_s:.1f}x faster than verifying every journal)")
    print(f"gate: {len(playbook.experiments)} experiments, {cases} testcases; verifying every "
          f"journal {gate_full_s:.2f} s, index cold {gate_cold_s:.2f} s, warm {gate_warm_s:.2f} s "
          f"({gate_warm_s / WARM_GOAL_S:.2f} of the goal, "
          f"{gate_full_s / gate_warm_s:.1f}x faster)")
    print(f"score: overall {overall:.1f}; verifying every journal {score_s:.2f} s "
          f"({score_s / SCORE_GOAL_S:.2f} of the {SCORE_GOAL_S:g} s goal), with the warm index "
          f"{score_warm_s:.2f} s")
    print(f"report_scale: journals={args.journals} coverage_s={full_s:.2f} "
          f"coverage_cold_s={cold_s:.2f} coverage_warm_s={warm_s:.2f} gate_s={gate_full_s:.2f} "
          f"gate_cold_s={gate_cold_s:.2f} gate_warm_s={gate_warm_s:.2f} score_s={score_s:.2f} "
          f"score_warm_s={score_warm_s:.2f}")


if __name__ == "__main__":
    main()
