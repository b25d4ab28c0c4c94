"""net.loss and net.partition as real packet rules (nftables and iptables) inside network
namespaces the test creates, with real TCP and UDP between them; tc netem is detected."""

import time
from collections.abc import Iterator

import pytest

from gameday.contract.backend import FaultRequest
from gameday.errors import FaultRejected
from gameday.node.host.net import DropRulesFault
from gameday.node.host.netrules import DropSpec, Nftables, available_mechanisms, netem_unavailable
from tests.node.net_support import (
    PREFIX,
    leftovers,
    netns_pair,
    sh,
    tcp_connects,
    tcp_listener,
    udp_delivered,
)

USABLE = [m for m, why in available_mechanisms().items() if why is None and m != "netem"]


@pytest.fixture(autouse=True)
def nothing_left() -> Iterator[None]:
    assert leftovers() == []
    yield
    assert leftovers() == []


def _ours(ns: str) -> list[str]:
    tables = [line for line in sh("ip", "netns", "exec", ns, "nft", "list", "tables"
                                  ).stdout.splitlines() if f" {PREFIX}_" in line]
    chains = [line for line in sh("ip", "netns", "exec", ns, "iptables", "-w", "-S"
                                  ).stdout.splitlines() if PREFIX in line]
    return tables + chains


@pytest.mark.parametrize("mechanism", USABLE)
def test_partition_drops_a_peer_and_revert_removes_exactly_our_rules(mechanism: str) -> None:
    with netns_pair() as pair:
        listener = tcp_listener(pair.b, pair.ip_b)
        port = listener.getsockname()[1]
        try:
            foreign = ["iptables", "-w", "-A", "INPUT", "-s", "192.0.2.9", "-j", "DROP"]
            sh("ip", "netns", "exec", pair.b, *foreign)  # someone else's rule: must stay
            assert tcp_connects(pair.a, pair.ip_b, port)
            fault = DropRulesFault("net.partition", prefix=PREFIX)
            request = FaultRequest("net.partition", {"netns": pair.b},
                                   {"peer": pair.ip_a, "mechanism": mechanism})
            details = fault.apply("f-part-1", request)
            assert details["mechanism"] == mechanism
            assert _ours(pair.b)
            assert not tcp_connects(pair.a, pair.ip_b, port)
            assert udp_delivered(pair, 50) == 0
            fault.revert("f-part-1", request)
            fault.revert("f-part-1", request)  # idempotent
            assert _ours(pair.b) == []
            assert "192.0.2.9" in sh("ip", "netns", "exec", pair.b, "iptables", "-S").stdout
            assert tcp_connects(pair.a, pair.ip_b, port)
        finally:
            listener.close()


@pytest.mark.parametrize("mechanism", USABLE)
def test_loss_drops_roughly_the_asked_share(mechanism: str) -> None:
    with netns_pair() as pair:
        fault = DropRulesFault("net.loss", prefix=PREFIX)
        request = FaultRequest("net.loss", {"netns": pair.b, "link": pair.link_b},
                               {"percent": 40, "direction": "ingress",
                                "mechanism": mechanism})
        fault.apply("f-loss-1", request)
        try:
            delivered = udp_delivered(pair, 1000)
        finally:
            fault.revert("f-loss-1", request)
        assert 420 <= delivered <= 780, delivered  # 600 expected
        assert udp_delivered(pair, 200) == 200
        assert _ours(pair.b) == []


def test_a_port_partition_leaves_other_ports_alone_and_ends_after_its_duration() -> None:
    with netns_pair() as pair:
        blocked = tcp_listener(pair.b, pair.ip_b)
        other = tcp_listener(pair.b, pair.ip_b)
        try:
            fault = DropRulesFault("net.partition", prefix=PREFIX)
            request = FaultRequest("net.partition", {"netns": pair.b},
                                   {"port": blocked.getsockname()[1], "duration_s": 1.0})
            fault.apply("f-part-2", request)
            assert not tcp_connects(pair.a, pair.ip_b, blocked.getsockname()[1])
            assert tcp_connects(pair.a, pair.ip_b, other.getsockname()[1])
            deadline = time.monotonic() + 5
            while _ours(pair.b) and time.monotonic() < deadline:
                time.sleep(0.1)
            assert _ours(pair.b) == []  # removed by itself
            assert tcp_connects(pair.a, pair.ip_b, blocked.getsockname()[1])
            fault.revert("f-part-2", request)
        finally:
            blocked.close()
            other.close()


def test_netem_is_detected_and_refused_with_the_reason_where_absent() -> None:
    reason = netem_unavailable()
    if reason is None:
        pytest.skip("this kernel has sch_netem")
    assert "netem" in reason
    with netns_pair() as pair, pytest.raises(FaultRejected, match="netem is unavailable"):
        DropRulesFault("net.loss", prefix=PREFIX).apply(
            "f-netem", FaultRequest("net.loss", {"netns": pair.a, "link": pair.link_a},
                                    {"percent": 10, "mechanism": "netem"}))


@pytest.mark.parametrize(("kind", "params", "message"), [
    ("net.partition", {}, "needs a peer, a port or a link"),
    ("net.partition", {"peer": "10.0.0.300"}, "params.peer"),
    ("net.partition", {"port": 70000}, "params.port"),
    ("net.loss", {"percent": 150}, "params.percent"),
    ("net.loss", {"percent": 5, "direction": "sideways"}, "params.direction"),
    ("net.partition", {"peer": "10.0.0.1", "mechanism": "netem"}, "params.mechanism"),
])
def test_bad_requests_are_refused(kind: str, params: dict[str, object], message: str) -> None:
    with pytest.raises(FaultRejected, match=message):
        DropRulesFault(kind, prefix=PREFIX).apply("f-bad", FaultRequest(kind, {}, params))


@pytest.mark.parametrize("link", ['x"\nadd table inet gdevil', "eth0 drop", "a" * 16, "..",
                                  "a/b", "a:1", "", "ünï"])
def test_interface_names_are_checked_by_the_kernels_rules(link: str) -> None:
    with pytest.raises(FaultRejected, match=r"target\.link"):
        DropRulesFault("net.partition", prefix=PREFIX).apply(
            "f-name", FaultRequest("net.partition", {"link": link}, {}))


@pytest.mark.skipif("nftables" not in USABLE, reason="nftables is not usable here")
def test_a_crafted_name_reaches_nft_as_data_and_adds_no_statement() -> None:
    """Even past the name check (the mechanism called directly), the JSON interface
    takes the name as a value: no table of the attacker's appears."""
    crafted = 'x";}\ntable inet gdevil { chain c { type filter hook input priority 0; } }\n#'
    with netns_pair() as pair:
        with pytest.raises(FaultRejected):
            Nftables().add_drop(f"{PREFIX}_crafted", DropSpec(link=crafted), pair.a)
        Nftables().add_drop(f"{PREFIX}_crafted", DropSpec(link='q"w'), pair.a)
        tables = sh("ip", "netns", "exec", pair.a, "nft", "list", "tables").stdout
        assert "gdevil" not in tables
        listed = sh("ip", "netns", "exec", pair.a, "nft", "-j", "list", "table", "inet",
                    f"{PREFIX}_crafted").stdout
        assert '"q\\"w"' in listed
        Nftables().remove(f"{PREFIX}_crafted", pair.a)
