"""What a lab node's link costs, and how fast link faults are seen.

1. A shard-sized HTTP exchange (``POST /partial`` on a keep-alive pool) directly and
   through a link (a ``CONNECT`` tunnel relay), same run: median and p99 latency, and
   the ratio.
2. On a real lab: ``/predict`` latency through the links (p50/p99 of 200 requests), and
   the time from each net/service fault's inject call returning to the fault being
   observable at ``/predict`` (median of 5 each): a probe with a 100 ms timeout is sent
   back to back until one is not answered ``200`` within it. Faults seen as slowness
   (partition, loss, latency, timeout) are therefore seen after about 100 ms at best:
   the figure includes the probe's own timeout.

``--samples N`` observes each fault N times (default 5) and ``--requests N`` times N
tunnel exchanges (default 2000) and N/10 ``/predict`` requests (a smoke run: ``--samples 1
--requests 200``).

Last line: ``net_link_overhead: tunnel_p50_ratio=… tunnel_p99_ratio=… predict_p99_ms=…
worst_observe_ms=…`` (goals: predict p99 well under 50 ms; observed within 100 ms).
"""

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from gameday.lab import api as lab
from gameday.lab.httpjson import ConnectionPool, JsonServer, fetch_json, json_response
from gameday.node.tcprelay import Relay
from gameday.stats import percentile
from gameday.wire.agent_client import AgentClient

ROW = [[(i + 1) / 16 for i in range(16)]]
PROBE_TIMEOUT_S = 0.1


def _p99(values: list[float]) -> float:
    return percentile(values, 0.99, nearest_rank=True)


def _timed(call: Callable[[], object], count: int) -> list[float]:
    times = []
    for _ in range(count):
        started = time.perf_counter()
        call()
        times.append((time.perf_counter() - started) * 1000)
    return times


def tunnel_ratios(count: int = 2000) -> tuple[float, float]:
    body = json.dumps({"partial": [[0.5] * 8], "shard": 0}).encode()
    server = JsonServer({("POST", "/partial"): lambda _: json_response(200, body.decode())})
    server.start()
    relay = Relay(tunnel=True, name="bench").start()
    try:
        direct = ConnectionPool(server.url)
        tunnelled = ConnectionPool(server.url, via=f"127.0.0.1:{relay.port}")
        payload = json.dumps({"inputs": ROW}).encode()
        _timed(lambda: direct.post("/partial", payload), 100)
        _timed(lambda: tunnelled.post("/partial", payload), 100)
        plain = _timed(lambda: direct.post("/partial", payload), count)
        via = _timed(lambda: tunnelled.post("/partial", payload), count)
    finally:
        relay.stop()
        server.stop()
    print(f"tunnel: direct p50 {statistics.median(plain):.3f} ms p99 "
          f"{_p99(plain):.3f} ms; via link p50 {statistics.median(via):.3f} ms "
          f"p99 {_p99(via):.3f} ms")
    return (statistics.median(via) / statistics.median(plain),
            _p99(via) / _p99(plain))


def _observe(predict: Callable[[float], tuple[object, float]], seen: Callable[[object, float],
             bool], deadline_s: float = 5.0) -> float:
    started = time.perf_counter()
    while time.perf_counter() - started < deadline_s:
        status, took = predict(PROBE_TIMEOUT_S)
        if seen(status, took):
            return (time.perf_counter() - started) * 1000
    return float("inf")


def lab_figures(repeats: int = 5, requests: int = 200) -> tuple[float, dict[str, float]]:
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp) / "lab"
        document = lab.up(directory)
        try:
            url = document["service_url"] + "/predict"

            def predict(timeout_s: float) -> tuple[object, float]:
                started = time.perf_counter()
                try:
                    status, _ = fetch_json("POST", url, {"inputs": ROW}, timeout=timeout_s)
                except OSError as exc:
                    status = type(exc).__name__
                return status, time.perf_counter() - started

            times = _timed(lambda: predict(5.0), requests)
            print(f"/predict through links: p50 {statistics.median(times):.2f} ms "
                  f"p99 {_p99(times):.2f} ms")
            token = Path(document["token_file"]).read_text().strip()
            nodes = {n["name"]: AgentClient(n["agent_url"], token) for n in document["nodes"]}
            def broken(status: object, _took: float) -> bool:
                return status != 200

            cases = {
                "net.link_flap": ("node-1", {"link": "uplink"}, {"down_s": 30}),
                "net.partition": ("node-1", {"link": "uplink"}, {}),
                "net.loss": ("node-1", {"link": "uplink"}, {"percent": 100}),
                "service.latency": ("node-0", {"name": "router"}, {"delay_ms": 200}),
                "service.timeout": ("node-0", {"name": "router"}, {"hang_s": 0.3}),
            }
            observed: dict[str, float] = {}
            for kind, (node, target, params) in cases.items():
                samples = []
                for _ in range(repeats):
                    fault = nodes[node].inject(kind, target, params, 30)
                    samples.append(_observe(predict, broken))
                    nodes[node].revert(fault["id"])
                    _observe(predict, lambda s, t: s == 200)
                observed[kind] = statistics.median(samples)
                print(f"{kind:16s} observed after {observed[kind]:.0f} ms (median of {repeats})")
        finally:
            lab.down(directory)
    return _p99(times), observed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--samples", type=int, default=5, help="observations per fault kind")
    parser.add_argument("--requests", type=int, default=2000,
                        help="tunnel exchanges (and a tenth as many /predict requests)")
    args = parser.parse_args()
    if args.samples < 1 or args.requests < 10:
        parser.error("--samples must be at least 1 and --requests at least 10")
    p50_ratio, p99_ratio = tunnel_ratios(args.requests)
    predict_p99, observed = lab_figures(args.samples, args.requests // 10)
    worst = max(observed, key=lambda k: observed[k])
    print(f"net_link_overhead: tunnel_p50_ratio={p50_ratio:.2f} tunnel_p99_ratio={p99_ratio:.2f} "
          f"predict_p99_ms={predict_p99:.1f} worst_observe_ms={observed[worst]:.0f} "
          f"worst_kind={worst}")


if __name__ == "__main__":
    main()
