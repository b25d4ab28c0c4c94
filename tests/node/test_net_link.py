"""net.link_flap on a real interface: a veth pair between two network namespaces the
test creates; real netlink (pyroute2), real TCP between the namespaces."""

import time
from collections.abc import Iterator

import pytest

from gameday.contract.backend import FaultRequest
from gameday.errors import FaultRejected
from gameday.node.host.net import LinkFlapFault, handlers, list_links
from tests.node.net_support import leftovers, netns_pair, sh, tcp_connects, tcp_listener
from tests.waiting import wait_until

pytestmark = pytest.mark.skipif(LinkFlapFault().unavailable() is not None,
                                reason=str(LinkFlapFault().unavailable()))


@pytest.fixture(autouse=True)
def nothing_left() -> Iterator[None]:
    assert leftovers() == []
    yield
    assert leftovers() == []


def _admin_up(ns: str, link: str) -> bool:
    return next(item["admin_up"] for item in list_links(ns) if item["name"] == link)


def test_link_flap_cuts_traffic_while_down_and_leaves_the_link_up() -> None:
    with netns_pair() as pair:
        listener = tcp_listener(pair.b, pair.ip_b)
        port = listener.getsockname()[1]
        try:
            wait_until(lambda: tcp_connects(pair.a, pair.ip_b, port), 5.0, "traffic over the link")
            fault = LinkFlapFault()
            request = FaultRequest("net.link_flap", {"link": pair.link_a, "netns": pair.a},
                                   {"down_s": 0.6, "up_s": 0.6, "count": 2})
            started = time.monotonic()
            details = fault.apply("f-flap1", request)
            assert details["schedule_s"] == 1.8 and details["mtu"] == 1500
            assert not _admin_up(pair.a, pair.link_a)
            assert not tcp_connects(pair.a, pair.ip_b, port)
            # up between the flaps, down again, then up for good
            wait_until(lambda: _admin_up(pair.a, pair.link_a), 2.0, "the link up")
            wait_until(lambda: not _admin_up(pair.a, pair.link_a), 2.0, "the link down")
            wait_until(lambda: _admin_up(pair.a, pair.link_a), 3.0, "the link up again")
            assert time.monotonic() - started >= 1.7
            wait_until(lambda: tcp_connects(pair.a, pair.ip_b, port), 5.0, "traffic over the link")
            fault.revert("f-flap1", request)
            fault.revert("f-flap1", request)  # idempotent
            assert _admin_up(pair.a, pair.link_a)
        finally:
            listener.close()


def test_revert_mid_schedule_brings_the_link_up_at_once() -> None:
    with netns_pair() as pair:
        fault = LinkFlapFault()
        request = FaultRequest("net.link_flap", {"link": pair.link_b, "netns": pair.b},
                               {"down_s": 60, "up_s": 1, "count": 3})
        fault.apply("f-flap2", request)
        assert not _admin_up(pair.b, pair.link_b)
        started = time.monotonic()
        fault.revert("f-flap2", request)
        assert _admin_up(pair.b, pair.link_b)
        assert time.monotonic() - started < 5


def test_revert_without_memory_still_brings_the_link_up() -> None:
    """An agent restart reverts leftovers with a fresh handler."""
    with netns_pair() as pair:
        request = FaultRequest("net.link_flap", {"link": pair.link_a, "netns": pair.a},
                               {"down_s": 60, "count": 1})
        sh("ip", "-n", pair.a, "link", "set", pair.link_a, "down")  # what a dead agent left
        LinkFlapFault().revert("f-flap3", request)
        assert _admin_up(pair.a, pair.link_a)


@pytest.mark.parametrize(("target", "params", "message"), [
    ({"link": "lo"}, {}, "loopback"),
    ({"link": "gdnnosuch0"}, {}, "no interface"),
    ({}, {}, "target.link"),
    ({"link": "x", "netns": "gdnet-none"}, {}, "no /run/netns"),
    ({"link": "x"}, {"count": 0}, "params.count"),
    ({"link": "x"}, {"down_s": "2"}, "params.down_s"),
])
def test_bad_requests_are_refused_before_anything_changes(target: dict[str, str],
                                                          params: dict[str, object],
                                                          message: str) -> None:
    with pytest.raises(FaultRejected, match=message):
        LinkFlapFault().apply("f-bad", FaultRequest("net.link_flap", target, params))


def test_an_interface_already_down_is_refused_and_left_down() -> None:
    with netns_pair() as pair:
        request = FaultRequest("net.link_flap", {"link": pair.link_a, "netns": pair.a}, {})
        first = LinkFlapFault()
        first.apply("f-flap4", request)
        with pytest.raises(FaultRejected, match="already down"):
            LinkFlapFault().apply("f-flap5", request)
        first.revert("f-flap4", request)


def test_inventory_lists_links_with_state_and_mtu() -> None:
    links = {item["name"]: item for item in handlers()[0].inventory()["links"]}
    assert links["lo"]["mtu"] == 65536 and links["lo"]["state"] in ("unknown", "up")


def test_namespace_sockets_open_without_a_fork_from_many_threads(monkeypatch: pytest.MonkeyPatch
                                                                  ) -> None:
    """Twelve threads list a namespace's links at once while a flap schedule runs on its own
    thread. Every listing is the namespace's own (its veth, never the host's links), no
    thread of the caller changes namespace, and nothing forks (``os.fork`` and
    ``multiprocessing.Process.start`` raise if called)."""
    import multiprocessing
    import os
    import threading

    def refuse(*_: object) -> None:
        raise AssertionError("forked")

    monkeypatch.setattr(os, "fork", refuse)
    monkeypatch.setattr(multiprocessing.Process, "start", refuse)
    host_ns = os.readlink("/proc/thread-self/ns/net")
    with netns_pair() as pair:
        fault = LinkFlapFault()
        request = FaultRequest("net.link_flap", {"link": pair.link_a, "netns": pair.a},
                               {"down_s": 0.2, "up_s": 0.2, "count": 3})
        fault.apply("f-many", request)
        seen: list[tuple[set[str], str]] = []
        errors: list[BaseException] = []

        def list_once() -> None:
            try:
                names = {str(item["name"]) for item in list_links(pair.a)}
                seen.append((names, os.readlink("/proc/thread-self/ns/net")))
            except BaseException as exc:
                errors.append(exc)

        try:
            threads = [threading.Thread(target=list_once) for _ in range(12)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(10)
        finally:
            fault.revert("f-many", request)
        assert errors == [] and len(seen) == 12
        assert all(names == {"lo", pair.link_a} and ns == host_ns for names, ns in seen)
        assert os.readlink("/proc/thread-self/ns/net") == host_ns
        assert _admin_up(pair.a, pair.link_a)


def test_a_namespace_that_is_gone_is_an_error_naming_it() -> None:
    with pytest.raises(OSError, match="gdnet-none"):
        list_links("gdnet-none")
