"""What ``net.latency`` really adds on a real link, and what it costs per packet.

Two network namespaces joined by a veth (made here, removed after); a UDP echo server,
a process of its own, in ``b``; the fault on ``b``'s egress, scoped to the echo's port
(the host backend's handler, the agent's own code, in this process); an independent
prober in ``a`` times each round trip with its own clock. For each asked delay (0.05,
0.15, 0.3, 1 and 5 ms, then 5 ms with 1 ms uniform and normal jitter): the round trips'
added time over the same link's baseline, p50 and p99, against the asked delay. Then a
burst of back-to-back datagrams through a 1 ms delay: the delayer's CPU time per
packet (its thread's own CPU clock).

``--probes N`` round trips per delay (default 300; a smoke run: ``--probes 20``).

Last line: ``net_latency: mechanism=… worst_p50_error_ms=… worst_p99_error_ms=…
cpu_us_per_packet=…`` (the error: measured added delay minus asked, over the delays
without jitter).
"""

import argparse
import contextlib
import socket
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # runs from a checkout

from bench.netpair import veth_pair
from bench.udpecho import echoes, round_trips_ms
from gameday.contract.backend import FaultRequest
from gameday.node.host.netdelay import LatencyFault
from gameday.node.host.netns import in_netns
from gameday.stats import percentile

DELAYS_MS = (0.05, 0.15, 0.3, 1.0, 5.0)
JITTERED = ((5.0, 1.0, "uniform"), (5.0, 1.0, "normal"))
def burst(ns: str, address: tuple[str, int], count: int, size: int = 50) -> int:
    """``count`` datagrams in back-to-back bursts of ``size`` (each burst's echoes
    collected before the next, so no socket buffer overflows); how many came back."""
    sock: socket.socket = in_netns(ns, lambda: socket.socket(socket.AF_INET,
                                                             socket.SOCK_DGRAM))
    sock.settimeout(1)
    back = 0
    try:
        for start in range(0, count, size):
            for i in range(start, min(count, start + size)):
                sock.sendto(i.to_bytes(4, "big"), address)
            with contextlib.suppress(TimeoutError):
                for _ in range(start, min(count, start + size)):
                    sock.recv(64)
                    back += 1
    finally:
        sock.close()
    return back


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--probes", type=int, default=300)
    args = parser.parse_args()
    handler = LatencyFault("gdbench")
    reason = handler.unavailable()
    if reason is not None:
        print(f"net_latency: unavailable here: {reason}")
        return 2
    errors_p50, errors_p99 = [], []
    with veth_pair() as pair, echoes(pair.b, pair.ip_b) as [echo]:
        a, b, lb, address = pair.a, pair.b, pair.link_b, echo.address
        base = round_trips_ms(a, address, args.probes)
        base_p50 = statistics.median(base)
        print(f"baseline round trip: p50 {base_p50:.3f} ms, "
              f"p99 {percentile(base, 0.99, nearest_rank=True):.3f} ms")
        print(f"{'asked':>18} {'added p50':>10} {'added p99':>10} {'p50 error':>10}")
        cases = [(d, 0.0, "uniform") for d in DELAYS_MS] + list(JITTERED)
        mechanism = ""
        for n, (delay, jitter, distribution) in enumerate(cases):
            request = FaultRequest("net.latency", {"netns": b, "link": lb},
                                   {"delay_ms": delay, "jitter_ms": jitter,
                                    "distribution": distribution, "port": address[1],
                                    "direction": "egress"})
            details = handler.apply(f"bench{n}", request)
            mechanism = f"{details['mechanism']}/{details.get('rules_mechanism', '-')}"
            try:
                added = [t - base_p50 for t in round_trips_ms(a, address, args.probes)]
            finally:
                handler.revert(f"bench{n}", request)
            p50 = statistics.median(added)
            p99 = percentile(added, 0.99, nearest_rank=True)
            label = f"{delay:g} ms" + (f" ± {jitter:g} {distribution}" if jitter else "")
            print(f"{label:>18} {p50:>10.3f} {p99:>10.3f} {p50 - delay:>+10.3f}")
            if not jitter:
                errors_p50.append(p50 - delay)
                errors_p99.append(p99 - delay)
        request = FaultRequest("net.latency", {"netns": b, "link": lb},
                               {"delay_ms": 1.0, "port": address[1],
                                "direction": "egress"})
        handler.apply("benchburst", request)
        try:
            back = burst(a, address, args.probes * 20)
            stats = handler.stats("benchburst") or {}
        finally:
            handler.revert("benchburst", request)
    print(f"burst: {stats.get('packets')} packets ({back} echoed), at most "
          f"{stats.get('max_held')} held at once, {stats.get('cpu_us_per_packet')} µs of "
          f"the delayer's CPU each")
    print(f"net_latency: mechanism={mechanism} worst_p50_error_ms={max(errors_p50):.3f} "
          f"worst_p99_error_ms={max(errors_p99):.3f} "
          f"cpu_us_per_packet={stats.get('cpu_us_per_packet')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
