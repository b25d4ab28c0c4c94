"""Network fault kinds: link flaps, packet loss, partitions."""

from faults.base import FaultKind, Param

LINK_SELECTOR_DOC = ("which link: {node: NAME} (lab: the node's uplink) | "
                     "{node: NAME, interface: IFACE, netns: NS} (host)")

_DURATION = Param("duration_s", float, "how long the fault acts before it clears by itself "
                  "(null: until reverted or its lease lapses)", default=None, minimum=0.05,
                  maximum=86400.0, nullable=True)
_PEER = Param("peer", str, "host: only traffic to/from this IP address or CIDR",
              default=None, nullable=True)
_PORT = Param("port", int, "host: only TCP/UDP traffic to/from this port", default=None,
              minimum=1, maximum=65535, nullable=True)
_DIRECTION = Param("direction", str, "host: ingress, egress or both (null: both)",
                   default=None, choices=("ingress", "egress", "both"), nullable=True)


def _mechanism(choices: tuple[str, ...]) -> Param:
    return Param("mechanism", str, "host: how the packets are dropped (auto: nftables, else "
                 "iptables, else tc netem)", default="auto", choices=choices)


NET_LINK_FLAP = FaultKind(
    name="net.link_flap",
    summary="a network link goes down and up again on a schedule; it is always left up",
    module="faults.net",
    func="link_flap",
    coverage_layer="network",
    family="Network link flap",
    also_layers=("node",),
    injected_at={"lab": "virtual", "host": "network"},
    selector="link",
    params=(
        Param("down_s", float, "seconds down in each flap", default=2.0, minimum=0.05,
              maximum=600.0),
        Param("up_s", float, "seconds up between flaps", default=2.0, minimum=0.05,
              maximum=600.0),
        Param("count", int, "number of flaps", default=1, minimum=1, maximum=1000),
    ),
    seen_through="connection resets and refused connections while down (router 503s), "
                 "link state in the agent's inventory",
    tags=("network", "link", "flap"),
)

NET_LOSS = FaultKind(
    name="net.loss",
    summary="a percentage of packets on a link is dropped; TCP retransmits them, so it "
            "shows as latency spikes (and timeouts at high loss)",
    module="faults.net",
    func="packet_loss",
    coverage_layer="network",
    family="Packet loss",
    also_layers=("service",),
    injected_at={"lab": "virtual", "host": "network"},
    selector="link",
    params=(
        Param("percent", float, "percent of packets dropped (lab: of chunks, each "
              "retransmitted after a 200 ms doubling timeout)", required=True, minimum=0.0,
              maximum=100.0),
        _DURATION, _PEER, _PORT, _DIRECTION,
        _mechanism(("auto", "nftables", "iptables", "netem")),
    ),
    seen_through="request latency (p99), retransmissions, timeouts",
    tags=("network", "loss", "packets"),
)

NET_PARTITION = FaultKind(
    name="net.partition",
    summary="a blackhole: every packet to/from a peer or port (lab: the node's link) is "
            "dropped silently; connections hang until it heals",
    module="faults.net",
    func="partition",
    coverage_layer="network",
    family="Network partition",
    also_layers=("service",),
    injected_at={"lab": "virtual", "host": "network"},
    selector="link",
    params=(_DURATION, _PEER, _PORT, _DIRECTION,
            _mechanism(("auto", "nftables", "iptables"))),
    seen_through="requests that hang until the client's timeout (router 503 after 5 s), "
                 "then recover when it heals",
    tags=("network", "partition", "blackhole"),
)

KINDS: tuple[FaultKind, ...] = (NET_LINK_FLAP, NET_LOSS, NET_PARTITION)
