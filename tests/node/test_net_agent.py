"""The host backend behind a real agent process (``gameday agent serve --backend host``):
net faults over the authenticated HTTP API, inside network namespaces the test creates;
a revert removes the rules, SIGTERM reverts what is still active."""

import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gameday.node.host.net import LinkFlapFault, list_links
from gameday.wire.agent_client import AgentClient
from tests.host_agent import host_agent
from tests.node.net_support import leftovers, netns_pair, sh, tcp_connects, tcp_listener

TOKEN = "951b2732720eaddc44c505d789104476bb3092e2cb462313e12aaa96ab52062b"

pytestmark = pytest.mark.skipif(LinkFlapFault().unavailable() is not None,
                                reason=str(LinkFlapFault().unavailable()))


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[tuple[AgentClient, subprocess.Popen[str]]]:
    assert leftovers() == []
    policy = {"kinds": ["net.link_flap", "net.loss", "net.partition"], "interfaces": ["*"]}
    try:
        with host_agent(tmp_path, TOKEN, policy, node="gdnet-host") as (url, proc):
            yield AgentClient(url, TOKEN), proc
    finally:
        assert leftovers() == []


def test_partition_and_flap_through_the_agent(
        agent: tuple[AgentClient, subprocess.Popen[str]]) -> None:
    client, proc = agent
    inventory = client.inventory()
    assert {"net.link_flap", "net.loss", "net.partition"} <= set(inventory["kinds"])
    assert any(link["name"] == "lo" for link in inventory["links"])
    with netns_pair() as pair:
        listener = tcp_listener(pair.b, pair.ip_b)
        port = listener.getsockname()[1]
        try:
            fault = client.inject("net.partition", {"netns": pair.b},
                                  {"peer": pair.ip_a}, 30)
            assert fault["injected_at"] == "network"
            assert not tcp_connects(pair.a, pair.ip_b, port)
            client.revert(fault["id"])
            assert tcp_connects(pair.a, pair.ip_b, port)
            assert "gameday_" not in sh("ip", "netns", "exec", pair.b, "nft", "list",
                                        "ruleset").stdout
            client.inject("net.link_flap", {"link": pair.link_a, "netns": pair.a},
                          {"down_s": 60}, 30)
            assert not tcp_connects(pair.a, pair.ip_b, port)
            proc.send_signal(signal.SIGTERM)  # the agent reverts everything on its way out
            assert proc.wait(10) == 0
            up = {item["name"]: item["admin_up"] for item in list_links(pair.a)}
            assert up[pair.link_a]
            deadline = time.monotonic() + 5
            while not tcp_connects(pair.a, pair.ip_b, port) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert tcp_connects(pair.a, pair.ip_b, port)
        finally:
            listener.close()
