"""Network fault actions (Chaos Toolkit activities): link flaps, packet loss, partitions,
added latency.

``link`` selects the link: ``{node: node-1}`` in the lab (each node's ``uplink``, the
data path from the router to the shards on that node); on a host
``{link: eth0}``, optionally ``{netns: NAME}`` for an interface inside a network
namespace (and ``node`` when the target has several agents). Each action checks
its arguments against the catalogue, checks the node blast radius
(``blast_radius.max_nodes``) and injects through the node's agent under a lease; the
run's ledger records it so ``revert`` (and the runner, always) undoes it.
"""

from collections.abc import Callable
from typing import Any

from faults._nodes import inject_on_node, inventory_of, selector_mapping
from gameday import activity
from gameday.activity import AgentClient
from gameday.errors import InvalidInput
from gameday.kinds import KindParams, KindSpec
from gameday.kinds.net import LINK_SELECTOR, NET_LATENCY, NET_LINK_FLAP, NET_LOSS, NET_PARTITION

__all__ = ["latency", "link_flap", "packet_loss", "partition", "revert"]



def link_flap(link: dict[str, Any] | None = None, down_s: float = 2.0, up_s: float = 2.0,
              count: int = 1, lease_s: float | None = None) -> dict[str, Any]:
    """Take a link down for ``down_s`` seconds and up again, ``count`` times, ``up_s`` apart.

    Lab: the node's uplink is cut: open connections are reset and new ones refused, so
    the router answers 503 for the shards on that node until it is up again. Host: the
    interface is set down and up through netlink (pyroute2). The link is always left
    up: after the schedule, on revert, and when the lease lapses.

    Returns ``{"faults": [{"id", "node", "target", "injected_at", "applied_at",
    "expires_at", "details"}]}``.
    """
    params = activity.validated(NET_LINK_FLAP, {"down_s": down_s, "up_s": up_s, "count": count})
    return _inject(NET_LINK_FLAP, "link_flap", link, params, lease_s)


def packet_loss(percent: float, link: dict[str, Any] | None = None,
                duration_s: float | None = None, peer: str | None = None,
                port: int | None = None, direction: str | None = None,
                mechanism: str = "auto", lease_s: float | None = None) -> dict[str, Any]:
    """Drop ``percent`` of the packets on a link, for ``duration_s`` (or until reverted).

    Lab: each chunk crossing the node's uplink is lost with that probability and
    retransmitted after a TCP-like timeout (200 ms, doubling), so loss shows as latency.
    Host: nftables ``numgen random`` (or iptables ``statistic``) drop rules in a
    table/chain of their own, scoped by ``link``, ``peer``, ``port`` and ``direction``
    (``mechanism: netem`` uses ``tc netem`` where the kernel has it); revert removes
    exactly what was added.
    """
    params = activity.validated(NET_LOSS, {"percent": percent, "duration_s": duration_s,
                                           "peer": peer, "port": port, "direction": direction,
                                           "mechanism": mechanism})
    return _inject(NET_LOSS, "packet_loss", link, params, lease_s)


def partition(link: dict[str, Any] | None = None, duration_s: float | None = None,
              peer: str | None = None, port: int | None = None, direction: str | None = None,
              mechanism: str = "auto", lease_s: float | None = None) -> dict[str, Any]:
    """Blackhole traffic for ``duration_s`` (or until reverted): nothing passes, nothing
    is refused, connections hang.

    Lab: the node's uplink holds every byte (new connections are accepted and hang)
    until it heals; then the held data flows. Host: drop rules for everything to/from
    ``peer`` and/or ``port`` (at least one, or a ``link``) in a table/chain of their own.
    """
    params = activity.validated(NET_PARTITION, {"duration_s": duration_s, "peer": peer,
                                                "port": port, "direction": direction,
                                                "mechanism": mechanism})
    return _inject(NET_PARTITION, "partition", link, params, lease_s)


def latency(delay_ms: float, link: dict[str, Any] | None = None, jitter_ms: float = 0.0,
            distribution: str = "uniform", correlation: float = 0.0,
            duration_s: float | None = None, peer: str | None = None,
            port: int | None = None, direction: str | None = None,
            mechanism: str = "auto", lease_s: float | None = None) -> dict[str, Any]:
    """Hold every packet on a link for ``delay_ms`` (± ``jitter_ms``), for ``duration_s``
    (or until reverted): the job slows down, nothing fails.

    Scoped like ``packet_loss`` (``link``, ``peer``, ``port``, ``direction``), so only the
    job's own traffic is slowed and the agent's and control plane's are not. Host:
    ``tc netem`` where the kernel has it, else an nftables ``queue`` to the agent's
    userspace delayer, which holds each packet its time and releases it in order; the
    mechanism used is in the returned ``details``. Lab: the node's uplink holds each
    chunk. Revert removes exactly what was added.
    """
    params = activity.validated(NET_LATENCY, {"delay_ms": delay_ms, "jitter_ms": jitter_ms,
                                              "distribution": distribution,
                                              "correlation": correlation,
                                              "duration_s": duration_s, "peer": peer,
                                              "port": port, "direction": direction,
                                              "mechanism": mechanism})
    return _inject(NET_LATENCY, "latency", link, params, lease_s)


def revert() -> dict[str, Any]:
    """Revert every fault this run applied (idempotent); fails if any could not be reverted."""
    return activity.revert_all()



def _link_target(selector: dict[str, Any]) -> Callable[[AgentClient], dict[str, Any]]:
    def build(client: AgentClient) -> dict[str, Any]:
        name = selector.get("link")
        netns = selector.get("netns")
        target: dict[str, Any] = {}
        if name is not None:
            links = [str(item.get("name")) for item in inventory_of(client).get("links", [])]
            if netns is None and name not in links:
                raise InvalidInput(f"no link {name!r} on that node (links: "
                                   f"{', '.join(links) or 'none'})", path="link.link")
            target["link"] = name
        if netns is not None:
            target["netns"] = netns
        return target
    return build


def _inject(kind: KindSpec[KindParams], action: str, link: Any, params: dict[str, Any],
            lease_s: float | None) -> dict[str, Any]:
    with activity.failing():
        selector = selector_mapping(link, LINK_SELECTOR)
        return inject_on_node(kind.name, action, selector.get("node"), "link",
                              _link_target(selector), params, lease_s)
