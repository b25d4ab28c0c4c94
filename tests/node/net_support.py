"""Helpers of the network fault tests: namespaces joined by a veth pair, sockets made
inside a namespace, and a check that nothing of ours is left behind.

Everything is named with this test process's prefix, ``gdnet`` and :data:`RUN`
(namespaces ``gdnetRUN-*``, veths ``gdnRUN*``, nftables tables and iptables chains
``gdnetRUN_*``), so that the suite's parallel workers (``make test``) never read each
other's live namespaces as their own leftovers.
"""

import contextlib
import os
import secrets
import socket
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass

from gameday.node.host.netns import in_netns

#: This process's part of every name (three hex digits of its pid).
RUN = f"{os.getpid() % 4096:03x}"
PREFIX = f"gdnet{RUN}"


def sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, check=check, timeout=20)


@dataclass(frozen=True)
class NetnsPair:
    """Namespaces ``a`` and ``b``, joined by veth ``link_a`` (in a) / ``link_b`` (in b)."""

    a: str
    b: str
    link_a: str
    link_b: str
    ip_a: str
    ip_b: str


@contextlib.contextmanager
def netns_pair() -> Iterator[NetnsPair]:
    tag = secrets.token_hex(3)
    octet = int(tag[:2], 16) % 250 + 1
    pair = NetnsPair(f"{PREFIX}-a-{tag}", f"{PREFIX}-b-{tag}", f"gdn{RUN}a{tag}",
                     f"gdn{RUN}b{tag}",
                     f"10.213.{octet}.1", f"10.213.{octet}.2")
    try:
        sh("ip", "netns", "add", pair.a)
        sh("ip", "netns", "add", pair.b)
        sh("ip", "link", "add", pair.link_a, "netns", pair.a, "type", "veth", "peer", "name",
           pair.link_b, "netns", pair.b)
        for ns, link, ip in ((pair.a, pair.link_a, pair.ip_a), (pair.b, pair.link_b, pair.ip_b)):
            sh("ip", "-n", ns, "addr", "add", f"{ip}/24", "dev", link)
            sh("ip", "-n", ns, "link", "set", link, "up")
            sh("ip", "-n", ns, "link", "set", "lo", "up")
        yield pair
    finally:
        sh("ip", "netns", "del", pair.a, check=False)
        sh("ip", "netns", "del", pair.b, check=False)


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
