"""A lab node's network link, and the node-level fault handlers that break it.

Every node runs one link, ``uplink``: an HTTP ``CONNECT`` tunnel (a
:class:`gameday.node.tcprelay.Relay`) on its own port. The router reaches every shard served
from the node's GPUs through it (the data path); management traffic (the agent API,
metrics scrapes, the controller) does not cross it, as on a cluster with a separate
management network.

Faults (target ``{"link": "uplink"}``, the default):

- ``net.link_flap`` (``down_s``, ``up_s``, ``count``): the link goes down (open
  connections reset, new ones reset on accept) and up again on a schedule; it is always
  left up, after the schedule and on revert;
- ``net.loss`` (``percent``, ``duration_s``): each chunk is lost with that probability
  and retransmitted after a TCP retransmission timeout (loss shows as latency);
- ``net.partition`` (``duration_s``): a blackhole: connections stay open, nothing
  passes (new connections are accepted and hang) until it heals, then held data flows;
- ``net.latency`` (``delay_ms``, ``jitter_ms``, ``distribution``, ``correlation``,
  ``duration_s``): each request crossing the link waits its drawn delay once, on its
  way to the shard (the lab's link is a stream relay, not a packet path: the delay is
  per request, not per packet).

``peer`` and ``port`` (the host backend's partition scope) are refused here: the lab's
link has a single peer, the router.
"""

from typing import Any

from gameday.contract.backend import FaultRequest
from gameday.errors import FaultRejected
from gameday.kinds.net import (
    NET_LATENCY,
    NET_LINK_FLAP,
    NET_LOSS,
    NET_PARTITION,
    LatencyParams,
    LossParams,
    PartitionParams,
)
from gameday.node.delays import DelaySampler
from gameday.node.phases import Phase, PhaseRunner, flap_phases, hold_phases
from gameday.node.tcprelay import Impairment, Relay

__all__ = ["LINK_NAME", "LabLink", "LinkFault", "link_handlers"]

LINK_NAME = "uplink"
LINK_MTU = 1500


class LabLink:
    """The node's link: a tunnel relay plus its name."""

    def __init__(self, node: str, port: int = 0) -> None:
        self.node = node
        self.name = LINK_NAME
        self.relay = Relay(port=port, tunnel=True, name=f"{node}-{LINK_NAME}")

    @property
    def url(self) -> str:
        host, port = self.relay.address
        return f"http://{host}:{port}"

    def start(self) -> "LabLink":
        self.relay.start()
        return self

    def stop(self) -> None:
        self.relay.stop()

    def inventory(self) -> dict[str, list[dict[str, Any]]]:
        effect = self.relay.effective()
        return {"links": [{"name": self.name, "state": "down" if effect.down else "up",
                           "mtu": LINK_MTU, "kind": "tcp-tunnel", "address": self.url,
                           "loss": round(effect.loss, 6), "held": effect.hold,
                           "connections": self.relay.connections(),
                           "stats": self.relay.stats.to_json()}]}


class LinkFault:
    """One net.* kind on the node's link; each fault runs its own phases."""

    injected_at = "virtual"

    def __init__(self, kind: str, link: LabLink) -> None:
        self.kind = kind
        self.link = link
        self._runners: dict[str, PhaseRunner] = {}

    def _plan(self, request: FaultRequest) -> tuple[Impairment, list[Phase]]:
        if self.kind == NET_LINK_FLAP.name:
            flap = NET_LINK_FLAP.backend_params(request.params)
            return Impairment(down=True), flap_phases(flap.down_s, flap.up_s, flap.count)
        scoped = {NET_LOSS.name: NET_LOSS, NET_PARTITION.name: NET_PARTITION,
                  NET_LATENCY.name: NET_LATENCY}[self.kind].backend_params(request.params)
        for scope in ("peer", "port", "direction"):
            if getattr(scoped, scope) is not None:
                raise FaultRejected(f"params.{scope} is not supported on the lab's link (its "
                                    f"only peer is the router)")
        if isinstance(scoped, LossParams):
            return Impairment(loss=scoped.percent / 100.0), hold_phases(scoped.duration_s)
        if isinstance(scoped, LatencyParams):
            if scoped.mechanism != "auto":
                raise FaultRejected(f"params.mechanism {scoped.mechanism} is a host's; the "
                                    f"lab's link holds requests itself (use auto)")
            return (Impairment(samplers=(DelaySampler.of(scoped),)),
                    hold_phases(scoped.duration_s))
        assert isinstance(scoped, PartitionParams)
        return Impairment(hold=True), hold_phases(scoped.duration_s)

    def apply(self, fault_id: str, request: FaultRequest) -> dict[str, Any]:
        name = request.target.get("link", LINK_NAME)
        if name != self.link.name:
            raise FaultRejected(f"target.link {name!r}: node {self.link.node} has one link, "
                                f"{self.link.name!r}")
        impairment, phases = self._plan(request)
        relay = self.link.relay
        runner = PhaseRunner(f"{self.kind}-{fault_id}", phases,
                             on=lambda: relay.impair(fault_id, impairment),
                             off=lambda: relay.lift(fault_id))
        self._runners[fault_id] = runner
        runner.start()
        total = sum(p.seconds for p in phases if p.seconds is not None)
        open_ended = any(p.seconds is None for p in phases)
        return {"link": self.link.name, "node": self.link.node, "address": self.link.url,
                "schedule_s": None if open_ended else round(total, 3)}

    def inventory(self) -> dict[str, list[dict[str, Any]]]:
        return self.link.inventory()

    def revert(self, fault_id: str, request: FaultRequest) -> None:
        runner = self._runners.pop(fault_id, None)
        if runner is not None:
            runner.cancel()
        self.link.relay.lift(fault_id)


def link_handlers(link: LabLink) -> list[LinkFault]:
    """The node's net.* handlers."""
    return [LinkFault(kind, link)
            for kind in ("net.link_flap", "net.loss", "net.partition", "net.latency")]
