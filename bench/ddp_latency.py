"""The seed's curve, for real: a torchrun DDP job's throughput against the latency added
to one rank's link, measured by gameday and by the job's own step timer.

The job (``bench/ddp_job.py``: gloo on CPU, ``torch==2.13.0``, a tiny model built in
code) has rank 0 and rank 1 in two network namespaces joined by a veth, so a delay on
rank 1's link slows only the collective's traffic. For each point, a ``gameday run``
(a real host agent in this process, the host backend's ``net.latency``, its policy
allowing rank 1's link alone) adds the delay to rank 1's egress for ``--fault-s``
seconds, and ``verifiers.throughput.degradation`` reads the job's log: its rate
during the fault (an interval) and the slowdown. The job's own step timer gives the
same rate over the same window; both are printed, with the relative difference.

``--delays`` (ms, comma-separated; default ``0.05,0.15,0.3,1,5``) and ``--jitter`` (a
last point, ``DELAY:JITTER`` normal; default ``1:0.5``; empty for none). A smoke run:
``--delays 1 --jitter '' --fault-s 1``.

Last line: ``ddp_latency: points=N worst_rate_diff_pct=… slowdown_at_1ms_pct=…``
(``worst_rate_diff_pct``: the largest difference between gameday's rate and the job's
own, in percent of the job's).
"""

import argparse
import json
import logging
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import structlog
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # runs from a checkout

from bench.ddp import LOG_PATTERN, ddp_job
from bench.netpair import veth_pair
from gameday.agent.policy import Policy
from gameday.agent.server import AgentServer
from gameday.node.host.backend import HostBackend
from gameday.node.host.netdelay import LatencyFault

REPO = Path(__file__).resolve().parent.parent
GAMEDAY = str(Path(sys.executable).with_name("gameday"))
# as `gameday agent serve` configures it (gameday/agent/serve.py), at WARNING
structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
                    cache_logger_on_first_use=True)

TOKEN = "gdbench-ddp-token-0123456789abcdef0123456789abcdef"


def experiment(path: Path, pair_b: str, link_b: str, log: Path, delay_ms: float,
               jitter_ms: float, fault_s: float) -> Path:
    params = {"delay_ms": delay_ms, "jitter_ms": jitter_ms, "distribution": "normal",
              "direction": "egress", "duration_s": fault_s}
    path.write_text(yaml.safe_dump({
        "version": "1.0.0", "title": f"{delay_ms:g} ms on rank 1's link slows the job",
        "description": "net.latency on one DDP rank's link; the throughput it costs",
        "extensions": [{"name": "gameday", "target": "host", "lease_s": 60}],
        "method": [  # the pause: the baseline is read after gameday's own start-up
            {"type": "action", "name": "delay-rank-1", "pauses": {"before": 2.5},
             "provider": {
                "type": "python", "module": "faults.net", "func": "latency",
                "arguments": {"link": {"netns": pair_b, "link": link_b}, **params}}},
            {"type": "probe", "name": "throughput-cost", "provider": {
                "type": "python", "module": "verifiers.throughput", "func": "degradation",
                "arguments": {"progress_log": {"path": str(log), "pattern": LOG_PATTERN},
                              "baseline_s": 2, "window_s": 0.5, "timeout_s": 10,
                              "interval_s": 0.1}}}],
        "rollbacks": [{"type": "action", "name": "revert", "provider": {
            "type": "python", "module": "faults.net", "func": "revert"}}]}))
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--delays", default="0.05,0.15,0.3,1,5")
    parser.add_argument("--jitter", default="1:0.5")
    parser.add_argument("--fault-s", type=float, default=2.0)
    args = parser.parse_args()
    points = [(float(d), 0.0) for d in args.delays.split(",") if d]
    if args.jitter:
        delay, jitter = args.jitter.split(":")
        points.append((float(delay), float(jitter)))
    handler = LatencyFault("gdbench")
    if handler.unavailable() is not None:
        print(f"ddp_latency: unavailable here: {handler.unavailable()}")
        return 2
    rows = []
    with tempfile.TemporaryDirectory(prefix="gdbench-ddp-") as tmp, veth_pair() as pair, \
            ddp_job(pair.a, pair.link_a, pair.ip_a, pair.b, pair.link_b, Path(tmp)) as job:
        base = Path(tmp)
        backend = HostBackend("ddp-host", [handler])
        backend.use_policy(Policy(kinds=frozenset({"net.latency"}),
                                  interfaces=frozenset({pair.link_b})))
        server = AgentServer(backend, token=TOKEN, node="ddp-host",
                             state_path=base / "agent.json").start()
        env = {**os.environ, "GAMEDAY_HOME": str(base / "home"),
               "GAMEDAY_AGENT_URL": server.url, "GAMEDAY_AGENT_TOKEN": TOKEN}
        try:
            job.wait_steps(300)
            for n, (delay, jitter) in enumerate(points):
                path = experiment(base / f"p{n}.yaml", pair.b, pair.link_b, job.log, delay,
                                  jitter, args.fault_s)
                journal = base / f"p{n}.json"
                done = subprocess.run([GAMEDAY, "run", str(path), "--journal-path",
                                       str(journal)], env=env, cwd=REPO, text=True,
                                      capture_output=True, timeout=120)
                if not journal.exists():
                    print(done.stdout[-2000:], done.stderr[-2000:])
                    return 1
                [result] = json.loads(journal.read_text())["gameday"]["verifiers"]
                m = result["measurement"]
                during = m["during"]
                own = job.timer().rate(during["start"], during["end"])
                own_base = job.timer().rate(m["baseline"]["start"], m["baseline"]["end"])
                rows.append((delay, jitter, m["baseline"]["rate"], during["rate"],
                             during["rate_min"], during["rate_max"], own_base, own,
                             m["slowdown_pct"], 100 * (1 - own / own_base)))
        finally:
            server.stop()
    print(f"{'added':>14} {'gameday steps/s (interval)':>30} {'own steps/s':>12} "
          f"{'slowdown gameday':>17} {'own':>6}")
    diffs = []
    for delay, jitter, _, mid, low, high, _, own, slow, own_slow in rows:
        label = f"{delay:g} ms" + (f" ± {jitter:g}" if jitter else "")
        interval = f"{mid:.0f} ({low:.0f}-{high:.0f})"
        print(f"{label:>14} {interval:>30} {own:>12.0f} {slow:>16.1f}% {own_slow:>5.1f}%")
        diffs.append(abs(mid - own) / own * 100)
    print(f"baselines: gameday {rows[0][2]:.0f} steps/s, own {rows[0][6]:.0f} steps/s")
    at_1ms = next((r[8] for r in rows if r[0] == 1.0 and not r[1]), float("nan"))
    print(f"ddp_latency: points={len(rows)} worst_rate_diff_pct={max(diffs):.1f} "
          f"slowdown_at_1ms_pct={at_1ms:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
