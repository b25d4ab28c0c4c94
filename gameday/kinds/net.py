"""Network fault kinds: link flaps, packet loss, partitions, added latency."""

from dataclasses import dataclass
from typing import Literal

from gameday.errors import InvalidInput
from gameday.kinds.params import param, required
from gameday.kinds.selectors import Selector, SelectorKey
from gameday.kinds.spec import KindParams, KindSpec

__all__ = [
    "KINDS",
    "LINK_SELECTOR",
    "NET_LATENCY",
    "NET_LINK_FLAP",
    "NET_LOSS",
    "NET_PARTITION",
    "LatencyParams",
    "LinkFlapParams",
    "LossParams",
    "PartitionParams",
]

LINK_SELECTOR = Selector(
    argument="link",
    doc="which link: {node: NAME} (lab: the node's uplink) | {node: NAME, link: IFACE, "
        "netns: NS} (host)",
    keys=(SelectorKey("node", (str,), "the node whose link it is"),
          SelectorKey("link", (str,), "host: the interface"),
          SelectorKey("netns", (str,), "host: the network namespace of the interface")))

_DURATION_DOC = ("how long the fault acts before it clears by itself (null: until reverted "
                 "or its lease lapses)")
_PEER_DOC = "host: only traffic to/from this IP address or CIDR"
_PORT_DOC = "host: only TCP/UDP traffic to/from this port"
_DIRECTION_DOC = "host: ingress, egress or both (null: both)"
_MECHANISM_DOC = "host: how the packets are dropped (auto: nftables, else iptables, else tc netem)"
_DELAY_MECHANISM_DOC = ("host: how the packets are held (auto: tc netem where the kernel has "
                        "it, else an nftables queue to the agent's userspace delayer)")



@dataclass(frozen=True, kw_only=True)
class LinkFlapParams(KindParams):
    """``net.link_flap``'s parameters."""

    down_s: float = param("seconds down in each flap", default=2.0, minimum=0.05,
                          maximum=600.0)
    up_s: float = param("seconds up between flaps", default=2.0, minimum=0.05, maximum=600.0)
    count: int = param("number of flaps", default=1, minimum=1, maximum=1000)


@dataclass(frozen=True, kw_only=True)
class PartitionParams(KindParams):
    """``net.partition``'s parameters (and the scope ``net.loss`` shares)."""

    duration_s: float | None = param(_DURATION_DOC, default=None, minimum=0.05,
                                     maximum=86400.0)
    peer: str | None = param(_PEER_DOC, default=None)
    port: int | None = param(_PORT_DOC, default=None, minimum=1, maximum=65535)
    direction: Literal["ingress", "egress", "both"] | None = param(_DIRECTION_DOC, default=None)
    mechanism: Literal["auto", "nftables", "iptables"] = param(_MECHANISM_DOC, default="auto")


@dataclass(frozen=True, kw_only=True)
class LossParams(KindParams):
    """``net.loss``'s parameters."""

    percent: float = required("percent of packets dropped (lab: of chunks, each "
                              "retransmitted after a 200 ms doubling timeout)", minimum=0.0,
                              maximum=100.0)
    duration_s: float | None = param(_DURATION_DOC, default=None, minimum=0.05,
                                     maximum=86400.0)
    peer: str | None = param(_PEER_DOC, default=None)
    port: int | None = param(_PORT_DOC, default=None, minimum=1, maximum=65535)
    direction: Literal["ingress", "egress", "both"] | None = param(_DIRECTION_DOC, default=None)
    mechanism: Literal["auto", "nftables", "iptables", "netem"] = param(_MECHANISM_DOC,
                                                                        default="auto")


@dataclass(frozen=True, kw_only=True)
class LatencyParams(KindParams):
    """``net.latency``'s parameters."""

    rules = "jitter_ms at most delay_ms"

    delay_ms: float = required("milliseconds each packet is held (fractions for "
                               "microseconds)", minimum=0.0, maximum=60000.0)
    jitter_ms: float = param("milliseconds the delay varies by (its spread: uniform "
                             "half-width or normal standard deviation)", default=0.0,
                             minimum=0.0, maximum=60000.0)
    distribution: Literal["uniform", "normal"] = param(
        "how the delay varies around delay_ms", default="uniform")
    correlation: float = param("percent by which each packet's variation follows the "
                               "previous one's", default=0.0, minimum=0.0, maximum=100.0)
    duration_s: float | None = param(_DURATION_DOC, default=None, minimum=0.05,
                                     maximum=86400.0)
    peer: str | None = param(_PEER_DOC, default=None)
    port: int | None = param(_PORT_DOC, default=None, minimum=1, maximum=65535)
    direction: Literal["ingress", "egress", "both"] | None = param(_DIRECTION_DOC, default=None)
    mechanism: Literal["auto", "netem", "nfqueue"] = param(_DELAY_MECHANISM_DOC,
                                                           default="auto")

    def check(self, path: str) -> None:
        if self.jitter_ms > self.delay_ms:
            raise InvalidInput(f"net.latency's jitter_ms ({self.jitter_ms:g}) exceeds "
                               f"delay_ms ({self.delay_ms:g}): a packet cannot leave "
                               "before it arrived", path=f"{path}.jitter_ms")


NET_LINK_FLAP = KindSpec(
    name="net.link_flap",
    summary="a network link goes down and up again on a schedule; it is always left up",
    module="faults.net",
    func="link_flap",
    coverage_layer="network",
    family="Network link flap",
    also_layers=("node",),
    injected_at={"lab": "virtual", "host": "network"},
    selects=LINK_SELECTOR,
    params_type=LinkFlapParams,
    seen_through="connection resets and refused connections while down (router 503s), "
                 "link state in the agent's inventory",
    tags=("network", "link", "flap"),
)

NET_LOSS = KindSpec(
    name="net.loss",
    summary="a percentage of packets on a link is dropped; TCP retransmits them, so it "
            "shows as latency spikes (and timeouts at high loss)",
    module="faults.net",
    func="packet_loss",
    coverage_layer="network",
    family="Packet loss",
    also_layers=("service",),
    injected_at={"lab": "virtual", "host": "network"},
    selects=LINK_SELECTOR,
    params_type=LossParams,
    seen_through="request latency (p99), retransmissions, timeouts",
    tags=("network", "loss", "packets"),
)

NET_PARTITION = KindSpec(
    name="net.partition",
    summary="a blackhole: every packet to/from a peer or port (lab: the node's link) is "
            "dropped silently; connections hang until it heals",
    module="faults.net",
    func="partition",
    coverage_layer="network",
    family="Network partition",
    also_layers=("service",),
    injected_at={"lab": "virtual", "host": "network"},
    selects=LINK_SELECTOR,
    params_type=PartitionParams,
    seen_through="requests that hang until the client's timeout (router 503 after 5 s), "
                 "then recover when it heals",
    tags=("network", "partition", "blackhole"),
)

NET_LATENCY = KindSpec(
    name="net.latency",
    summary="every packet on a link (or only a peer's or port's) is held for delay_ms, "
            "with jitter: the job slows down, nothing fails",
    module="faults.net",
    func="latency",
    coverage_layer="network",
    family="Network latency",
    also_layers=("service",),
    injected_at={"lab": "virtual", "host": "network"},
    selects=LINK_SELECTOR,
    params_type=LatencyParams,
    seen_through="request latency (p50/p99), collective (AllReduce) time, the job's "
                 "throughput (verifiers.throughput.degradation)",
    tags=("network", "latency", "jitter", "degradation"),
)

KINDS: tuple[KindSpec[KindParams], ...] = (NET_LINK_FLAP, NET_LOSS, NET_PARTITION,
                                           NET_LATENCY)
