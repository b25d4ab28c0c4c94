"""A UDP echo server in a network namespace, and a prober that times round trips to it
from another: the independent clock ``net.latency`` is measured with (``bench/
net_latency.py``, ``tests/node/test_net_latency.py``).

The server is a process of its own (``ip netns exec``), as a job's would be: the traffic
a fault slows never comes from the agent's process.
"""

import contextlib
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

from gameday.node.host.netns import in_netns

__all__ = ["Echo", "echoes", "round_trips_ms"]

SERVER = ("import socket, sys\n"
          "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind((sys.argv[1], 0))\n"
          "print(s.getsockname()[1], flush=True)\n"
          "while True:\n"
          "    data, peer = s.recvfrom(64); s.sendto(data, peer)\n")


class Echo:
    """One echo server on ``ip`` inside ``ns``; ``address`` is where it listens."""

    def __init__(self, ns: str, ip: str) -> None:
        self.proc = subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, "-c",
                                      SERVER, ip], stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        self.address = (ip, int(self.proc.stdout.readline()))

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait(10)
        assert self.proc.stdout is not None
        self.proc.stdout.close()


@contextlib.contextmanager
def echoes(ns: str, ip: str, count: int = 1) -> Iterator[list[Echo]]:
    """``count`` echo servers, stopped when the block ends."""
    servers: list[Echo] = []
    try:
        servers += [Echo(ns, ip) for _ in range(count)]
        yield servers
    finally:
        for server in servers:
            server.close()


def round_trips_ms(ns: str, address: tuple[str, int], count: int) -> list[float]:
    """``count`` sequential round trips from namespace ``ns``, each timed by the prober."""
    sock: socket.socket = in_netns(ns, lambda: socket.socket(socket.AF_INET,
                                                             socket.SOCK_DGRAM))
    sock.settimeout(5)
    times = []
    try:
        for i in range(count):
            payload = i.to_bytes(4, "big")
            started = time.perf_counter()
            sock.sendto(payload, address)
            while sock.recv(64) != payload:
                pass
            times.append((time.perf_counter() - started) * 1000)
    finally:
        sock.close()
    return times
