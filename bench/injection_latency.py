"""Injection latency: how soon after a fault is injected it can be seen.

One embedded lab (2 nodes x 4 virtual GPUs, 6 shards) for the whole bench. For every
fault kind the lab's node agents offer (``GET /v1/inventory`` -> ``kinds``), ``--trials``
times: inject through the node's agent (:class:`gameday.wire.agent_client.AgentClient`, the
lab token), then poll the fault's *channel* until the fault shows there; the figure is
the time from the inject call returning to the poll that first shows it (confirmed by
the next poll, so one slow request under load does not count). Then revert, wait until
the effect is gone and the lab has settled (every shard serving, every GPU healthy,
``/predict`` answering), and go on.

Channels and goals:

- ``prometheus`` (``gpu.*``, on a spare GPU, one that holds no shard): the lab's real
  Prometheus (scrape interval 1 s), an instant query every 20 ms for the DCGM series
  the fault changes: ``ECC_DBE_VOL_TOTAL`` (ecc), ``FB_USED`` (oom), ``XID_ERRORS``
  (xid), ``GPU_TEMP`` (thermal), the GPU's series vanishing (fall_off_bus). Each is
  injected at a uniformly random phase of the scrape cycle (``--seed``), so the figure
  is the wait for the next scrape plus the query: about half an interval at the median,
  a whole one at worst. Goal: one scrape interval + 100 ms = 1100 ms.
- ``predict`` (``net.*``, ``service.*``): ``POST /predict`` sent back to back with a
  50 ms timeout; seen when one fails or is not answered within it. A hang or a delay
  is therefore seen no sooner than 50 ms: **the figure includes the probe timeout**.
- ``store read`` (``storage.*``): open + read + close of a weights file on the lab's
  store (a real FUSE mount), in a thread waited on for 50 ms; seen when it errors or is
  not done within 50 ms (stall, slow: **the figure includes the probe timeout**).
- ``/proc`` (``process.*``): the shard's ``/proc/PID/stat``: gone or a zombie (kill),
  state ``T`` (pause); polled every 1 ms.
- ``cgroup`` (``node.*``): the hog's own cgroup: CPU time charged to it reaching 10 ms
  (cpu_hog, quota 50 % of a CPU, so at least 20 ms after the hog starts), memory charged
  to it reaching the held size (memory_hog, 64 MiB); polled every 1 ms.

Parameters: gpu.ecc double_bit x1, gpu.oom half the free memory, gpu.xid 31,
gpu.thermal 92 C; net.* on node-1's uplink (link_flap down 30 s, loss 100 %,
partition); service.latency 200 ms and service.timeout 0.3 s on the router;
storage.stall (all ops), storage.errors (EIO, 100 %), storage.slow (200 ms) on the
store; process.* on shard 0's process; node.* hogs on node-0 (30 s, reverted early).
``met`` compares the median with the goal.

Direct-effect goal: 100 ms. ``k8s.*`` kinds are left out: they need a Kubernetes API
and this lab has none. The hogs' cgroups are named ``gdlat-...`` (``$GAMEDAY_CGROUP_PREFIX``).
Before each trial the channel must show no fault (for ``/predict`` and the store read:
three probes in a row pass within the timeout). At the end no fault may be active on any
agent (checked before ``down``), and after ``down`` no process, FUSE mount or ``gdlat``
cgroup of the lab may be left.

Prints a table (kind, channel, median ms, p95 ms, goal ms, met); last line::

    injection_latency: kinds=N worst_median_ms=… worst_kind=… met=M/N
"""

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from latency_channels import (
    PROBE_TIMEOUT_S,
    SETTLE_DEADLINE_S,
    BenchError,
    Case,
    Lab,
    Trial,
    case_for,
    proc_state,
    wait,
)

from gameday.errors import GamedayError
from gameday.lab import api as lab
from gameday.node.cgroups import detect
from gameday.node.faultfs.mount import fuse_mounts

OBSERVE_DEADLINE_S = 10.0
LEASE_S = 60.0
CGROUP_PREFIX = "gdlat"
PREFIX_ENV = "GAMEDAY_CGROUP_PREFIX"


def observe(case: Case, trial: Trial, fault: dict[str, Any], started: float) -> float:
    """Milliseconds from ``started`` to the first poll that shows the fault, confirmed by
    the next poll."""
    end = started + OBSERVE_DEADLINE_S
    while True:
        if trial.seen(fault):
            at = time.perf_counter()
            if trial.seen(fault):
                return (at - started) * 1000
        if time.perf_counter() > end:
            raise BenchError(f"{case.kind}: not seen through {case.channel} within "
                             f"{OBSERVE_DEADLINE_S:g} s of the inject")
        if case.poll_s:
            time.sleep(case.poll_s)


def run_trial(lab: Lab, case: Case, rng: random.Random) -> float:
    lab.settle()
    trial = case.prepare(lab)
    wait(f"{case.kind}: {case.channel} clean before the inject", trial.ready,
         SETTLE_DEADLINE_S, 0.05)
    if case.phase_s:
        time.sleep(rng.uniform(0.0, case.phase_s))
    agent = lab.agents[trial.node]
    fault = agent.inject(case.kind, trial.target, trial.params, LEASE_S)
    started = time.perf_counter()
    try:
        took = observe(case, trial, fault, started)
    finally:
        agent.revert(fault["id"])
    wait(f"{case.kind}: the effect gone after the revert",
         lambda: trial.gone(fault), SETTLE_DEADLINE_S, max(case.poll_s, 0.02))
    return took


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def bench(lab: Lab, trials: int, only: list[str] | None,
          rng: random.Random) -> list[tuple[Case, list[float]]]:
    kinds = sorted(set().union(*(c.inventory()["kinds"] for c in lab.agents.values())))
    skipped = [k for k in kinds if case_for(k) is None]
    if skipped:
        print(f"left out (no channel on this lab): {', '.join(skipped)}")
    print("left out: k8s.* (they need a Kubernetes API; the lab has none)")
    unknown = sorted(set(only or ()) - set(kinds))
    if unknown:
        raise BenchError(f"--kinds: the lab offers no {', '.join(unknown)}; it offers "
                         f"{', '.join(kinds)}")
    results = []
    for kind in kinds:
        case = case_for(kind)
        if case is None or (only and kind not in only):
            continue
        samples = [run_trial(lab, case, rng) for _ in range(trials)]
        print(f"  {kind:18s} median {statistics.median(samples):7.1f} ms "
              f"({trials} trials)", flush=True)
        results.append((case, samples))
    return results


def report(results: list[tuple[Case, list[float]]]) -> None:
    print(f"\n{'kind':18s} {'channel':12s} {'median ms':>10s} {'p95 ms':>8s} "
          f"{'goal ms':>8s}  met")
    met = 0
    for case, samples in results:
        median = statistics.median(samples)
        ok = median <= case.goal_ms
        met += ok
        print(f"{case.kind:18s} {case.channel:12s} {median:10.1f} {_p95(samples):8.1f} "
              f"{case.goal_ms:8.0f}  {'yes' if ok else 'NO'}")
    print(f"* the figure includes the probe's own {PROBE_TIMEOUT_S * 1000:.0f} ms timeout "
          f"(a hang or delay is seen only when a probe is not answered within it)")
    print("prometheus: injected at a uniformly random phase of the 1 s scrape cycle; the "
          "figure is the wait for the next scrape plus the query")
    worst_case, worst = max(results, key=lambda r: statistics.median(r[1]))
    print(f"injection_latency: kinds={len(results)} "
          f"worst_median_ms={statistics.median(worst):.1f} worst_kind={worst_case.kind} "
          f"met={met}/{len(results)}")


def leftovers(directory: Path) -> list[str]:
    """What the lab left after ``down``: processes naming its directory, FUSE mounts
    under it, cgroups with the bench's prefix."""
    found = [f"pid {pid}" for pid in _processes_naming(str(directory))]
    found += [f"mount {m}" for m in fuse_mounts(directory)]
    hierarchies = detect()
    roots = [*hierarchies.v1.values(), *([hierarchies.v2] if hierarchies.v2 else [])]
    found += [f"cgroup {entry}" for root in roots if root.is_dir()
              for entry in root.iterdir()
              if entry.is_dir() and entry.name.startswith(CGROUP_PREFIX + "-")]
    return found


def _processes_naming(marker: str) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if marker in cmdline and proc_state(int(entry.name)) not in (None, "Z", "X"):
            pids.append(int(entry.name))
    return pids


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=20, help="trials per kind (default 20)")
    parser.add_argument("--kinds", nargs="*", help="only these kinds (default: all)")
    parser.add_argument("--seed", type=int, default=0,
                        help="seed of the inject phases of the metric kinds (default 0)")
    args = parser.parse_args()
    if args.trials < 1:
        parser.error("--trials must be >= 1")
    os.environ[PREFIX_ENV] = CGROUP_PREFIX  # the lab's agents name hog cgroups with it
    results: list[tuple[Case, list[float]]] = []
    error = None
    with tempfile.TemporaryDirectory(prefix="gdlat-") as tmp:
        directory = Path(tmp) / "lab"
        try:
            the_lab = Lab(lab.up(directory))
            results = bench(the_lab, args.trials, args.kinds, random.Random(args.seed))
            the_lab.settle()
            left = the_lab.active_faults()
            if left:
                raise BenchError(f"faults still active at the end: "
                                 f"{[(f['kind'], f['id']) for f in left]}")
        except (BenchError, GamedayError, OSError) as exc:
            error = f"{type(exc).__name__}: {exc}"
        finally:
            lab.down(directory)
        behind = leftovers(directory)
    if error or behind:
        print(f"injection_latency: error: {error or 'left behind: ' + '; '.join(behind)}",
              file=sys.stderr)
        return 1
    report(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
