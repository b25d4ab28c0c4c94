"""Helpers of the network fault tests: namespaces joined by a veth pair, sockets made
inside a namespace, and a check that nothing of ours is left behind.

Everything is named with this test process's prefix, ``gdnet`` and :data:`RUN`
(namespaces ``gdnetRUN-*``, veths ``gdnRUN*``, nftables tables and iptables chains
``gdnetRUN_*``), so that the suite's parallel workers (``make test``) never read each
other's live namespaces as their own leftovers.
"""

import contextlib
import os
import socket
import subprocess
import threading

from bench.netpair import Pair, veth_pair
from gameday.node.host.netns import in_netns

#: This process's part of every name (three hex digits of its pid).
RUN = f"{os.getpid() % 4096:03x}"
PREFIX = f"gdnet{RUN}"


def sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, check=check, timeout=20)


#: Namespaces ``a`` and ``b``, joined by veth ``link_a`` (in a) / ``link_b`` (in b).
NetnsPair = Pair


def netns_pair() -> contextlib.AbstractContextManager[NetnsPair]:
    return veth_pair(PREFIX, f"gdn{RUN}", "10.213")


def tcp_listener(ns: str, ip: str) -> socket.socket:
    def make() -> socket.socket:
        sock = socket.create_server((ip, 0))
        sock.settimeout(0.2)
        return sock
    listener: socket.socket = in_netns(ns, make)
    threading.Thread(target=_accept_forever, args=(listener,), daemon=True).start()
    return listener


def _accept_forever(listener: socket.socket) -> None:
    while True:
        try:
            conn, _ = listener.accept()
        except TimeoutError:
            continue
        except OSError:
            return
        conn.close()


def tcp_connects(ns: str, ip: str, port: int, timeout_s: float = 0.3) -> bool:
    """Whether a TCP connection from ``ns`` to ``ip:port`` is established in time."""
    def make() -> socket.socket:
        return socket.socket()
    sock: socket.socket = in_netns(ns, make)
    sock.settimeout(timeout_s)
    try:
        sock.connect((ip, port))
        return True
    except OSError:
        return False
    finally:
        sock.close()


def udp_delivered(pair: NetnsPair, count: int) -> int:
    """Send ``count`` datagrams from a to b; how many arrived."""
    receiver: socket.socket = in_netns(pair.b, lambda: socket.socket(socket.AF_INET,
                                                                     socket.SOCK_DGRAM))
    sender: socket.socket = in_netns(pair.a, lambda: socket.socket(socket.AF_INET,
                                                                   socket.SOCK_DGRAM))
    try:
        receiver.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        receiver.bind((pair.ip_b, 0))
        port = receiver.getsockname()[1]
        for i in range(count):
            sender.sendto(i.to_bytes(4, "big"), (pair.ip_b, port))
        receiver.settimeout(0.3)
        seen = set()
        with contextlib.suppress(TimeoutError):
            while len(seen) < count:
                seen.add(receiver.recv(16))
        return len(seen)
    finally:
        receiver.close()
        sender.close()


def leftovers() -> list[str]:
    """Everything of ours still on the host (root namespace): should be empty."""
    found = [f"netns {line.split()[0]}" for line in sh("ip", "netns", "list").stdout.splitlines()
             if line.startswith(PREFIX)]
    found += [f"link {line.split(':')[1].strip()}"
              for line in sh("ip", "-o", "link", "show").stdout.splitlines()
              if line.split(":")[1].strip().split("@")[0].startswith(f"gdn{RUN}")]
    found += [f"nft {line}" for line in sh("nft", "list", "tables").stdout.splitlines()
              if f" {PREFIX}_" in line]
    for table in ("filter", "nat"):
        rules = sh("iptables", "-w", "-t", table, "-S", check=False).stdout
        found += [f"iptables {table}: {line}" for line in rules.splitlines() if PREFIX in line]
    return found
