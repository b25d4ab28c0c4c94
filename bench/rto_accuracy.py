"""RTO accuracy: gameday's measured RTO vs the lab's ground truth, and vs the RTO Chaos
Toolkit's continuous steady-state hypothesis (default frequency 1 s) would give.

Each trial, on a lab of its own: the run's recorder samples ``POST /predict`` every
100 ms (``--interval-s``); a double-bit ECC error (Xid 48) hits the GPU holding shard
0; the controller must cordon it and move the shard. Then:

- measured: ``verifiers.rto.measure_recovery`` from the recorder (``stable_for_s`` 1.5);
- truth: the controller's event log, fault ``applied_at`` -> the ``shard_moved`` event of
  shard 0 (the new shard serves and the router has its route);
- toolkit: the same recorded SLI timeline, sampled as ``chaos run
  --hypothesis-strategy continuously`` samples it: an iteration, then 1 s of wait after
  it ends (chaoslib's ``run_hypothesis_continuously``); its RTO is the first passing
  iteration after a failing one, minus the onset.

Errors are ``|rto - truth|``; the last line is ``rto_accuracy: trials=N
p95_error_s=… toolkit_p95_error_s=… ratio=…`` (ratio = toolkit / gameday). Goal:
p95 error <= 0.05 s at 100 ms (<= 0.015 s with ``--interval-s 0.01``) and at least 4x
smaller than the toolkit's.
"""

import argparse
import math
import tempfile
import time
from pathlib import Path

import faults.gpu
from gameday import logs
from gameday.engine import session as sessions
from gameday.engine.recorder import Reading
from gameday.experiment.extension import Extension
from gameday.lab import api as lab
from gameday.targets.base import lab_target
from verifiers.placement import HttpPlacementSource
from verifiers.rto import measure_recovery
from verifiers.sli import recorder_for

TOOLKIT_FREQUENCY_S = 1.0


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]


def toolkit_rto(readings: list[Reading], started_at: float, onset: float) -> float | None:
    """The RTO a continuous hypothesis at 1 s frequency would report from this timeline."""
    tick = started_at
    failed = False
    end = readings[-1].t
    while tick <= end:
        earlier = [r for r in readings if r.t <= tick]
        state = earlier[-1] if earlier else readings[0]
        if tick >= onset:
            if not state.ok:
                failed = True
            elif failed:
                return tick - onset
        tick += state.latency_s + TOOLKIT_FREQUENCY_S
    return None


def wait_healthy(source: HttpPlacementSource, shards: int, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        placement = source.read()
        if (sum(s.status == "serving" for s in placement.shards) == shards
                and all(g.state == "healthy" for g in placement.gpus)):
            return
        time.sleep(0.25)
    raise RuntimeError("the lab did not heal between trials")


def trial(lab_dir: Path, interval_s: float) -> tuple[float, float, float | None]:
    """One trial: (measured, truth, toolkit) RTO in seconds, the SLI sampled every
    ``interval_s``; toolkit None when its hypothesis never saw the outage."""
    target = lab_target(lab_dir)
    session = sessions.activate(sessions.Session(target=target, extension=Extension()))
    assert target.service_url and target.placement_url
    source = HttpPlacementSource(target.placement_url)
    try:
        session.recorder = recorder_for({"http": target.service_url + "/predict",
                                         "interval_s": interval_s}, session.clock)
        session.recorder.start()
        time.sleep(1.0 + (time.time() % 1.0))  # a random phase against the 1 s ticks
        faults.gpu.ecc_error(gpu={"holding_shard": 0}, kind="double_bit", count=1, xid=48)
        result = measure_recovery(stable_for_s=1.5, expect_outage=True, timeout_s=60,
                                  detect={})
        onset = float(result["onset"])
        moved = [e for e in source.read().events
                 if e.type == "shard_moved" and e.shard == 0 and e.t >= onset]
        truth = moved[0].t - onset
        readings = session.recorder.combined()
        started = session.recorder.started_at or readings[0].t
        return float(result["rto_s"]), truth, toolkit_rto(readings, started, onset)
    finally:
        session.close("bench")
        sessions.deactivate()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--interval-s", type=float, default=0.1,
                        help="the SLI sampling interval (default 0.1 s)")
    args = parser.parse_args()
    logs.configure(None)  # warnings only, on stderr
    errors: list[float] = []
    toolkit_errors: list[float] = []
    missed = 0
    with tempfile.TemporaryDirectory(prefix="gdrpo-bench-") as tmp:
        lab_dir = Path(tmp) / "lab"
        info = lab.up(lab_dir)
        try:
            source = HttpPlacementSource(info["placement_url"])
            for number in range(1, args.trials + 1):
                wait_healthy(source, int(info["shape"]["shards"]))
                measured, truth, toolkit = trial(lab_dir, args.interval_s)
                errors.append(abs(measured - truth))
                missed += toolkit is None
                toolkit_errors.append(truth if toolkit is None else abs(toolkit - truth))
                seen = "missed" if toolkit is None else f"{toolkit:.3f} s"
                print(f"trial {number}: truth {truth:.3f} s, gameday {measured:.3f} s "
                      f"(error {errors[-1]:.3f}), toolkit {seen} "
                      f"(error {toolkit_errors[-1]:.3f})", flush=True)
        finally:
            lab.down(lab_dir)
    ours, theirs = p95(errors), p95(toolkit_errors)
    ratio = theirs / ours if ours > 0 else math.inf
    print(f"rto_accuracy: trials={args.trials} interval_s={args.interval_s:g} "
          f"p95_error_s={ours:.3f} toolkit_p95_error_s={theirs:.3f} ratio={ratio:.1f} "
          f"toolkit_missed={missed}")


if __name__ == "__main__":
    main()
