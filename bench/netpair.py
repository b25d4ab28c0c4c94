"""Two network namespaces joined by a veth, made for a bench (or a test) and removed after."""

import contextlib
import secrets
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass

__all__ = ["Pair", "veth_pair"]


@dataclass(frozen=True)
class Pair:
    """Namespaces ``a`` and ``b``, joined by veth ``link_a`` (in a) / ``link_b`` (in b)."""

    a: str
    b: str
    link_a: str
    link_b: str
    ip_a: str
    ip_b: str


def _sh(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True, timeout=20)


@contextlib.contextmanager
def veth_pair(prefix: str = "gdbench", link_prefix: str = "gdb",
              subnet: str = "10.214") -> Iterator[Pair]:
    """Namespaces ``PREFIX-a-TAG`` / ``PREFIX-b-TAG``, veths ``LINK_PREFIXaTAG`` /
    ``LINK_PREFIXbTAG`` with ``SUBNET.N.1`` / ``SUBNET.N.2`` (a random tag and ``N``)."""
    tag = secrets.token_hex(3)
    octet = int(tag[:2], 16) % 250 + 1
    pair = Pair(f"{prefix}-a-{tag}", f"{prefix}-b-{tag}", f"{link_prefix}a{tag}",
                f"{link_prefix}b{tag}", f"{subnet}.{octet}.1", f"{subnet}.{octet}.2")
    try:
        _sh("ip", "netns", "add", pair.a)
        _sh("ip", "netns", "add", pair.b)
        _sh("ip", "link", "add", pair.link_a, "netns", pair.a, "type", "veth", "peer", "name",
            pair.link_b, "netns", pair.b)
        for ns, dev, ip in ((pair.a, pair.link_a, pair.ip_a), (pair.b, pair.link_b, pair.ip_b)):
            _sh("ip", "-n", ns, "addr", "add", f"{ip}/24", "dev", dev)
            _sh("ip", "-n", ns, "link", "set", dev, "up")
            _sh("ip", "-n", ns, "link", "set", "lo", "up")
        yield pair
    finally:
        subprocess.run(["ip", "netns", "del", pair.a], capture_output=True)
        subprocess.run(["ip", "netns", "del", pair.b], capture_output=True)
