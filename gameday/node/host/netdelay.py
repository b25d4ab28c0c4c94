"""``net.latency`` on a host: every matching packet held ``delay_ms`` (± ``jitter_ms``).

Two mechanisms, each named in the fault's details (and so in the plan and journal):

- ``netem``: a ``tc netem delay`` root qdisc on the link, where the kernel has
  ``sch_netem``. netem acts on one link's egress and on all its packets, so ``auto``
  picks it only for ``link`` with ``direction: egress`` and no ``peer`` or ``port``.
- ``nfqueue``: packet rules of the fault's own (scoped like ``net.loss``: ``link``,
  ``peer``, ``port``, ``direction``) send the matching packets to a netfilter queue,
  where the agent's userspace delayer (:mod:`gameday.node.host.nfqueue`) holds each its
  time and releases them in order. The rules are an nftables ``queue`` where the
  kernel has ``nft_queue``, else iptables ``NFQUEUE`` (which iptables-nft serves
  through the xtables compatibility layer). Layer: the packet, before routing on
  ingress and after it on egress; the agent's own and the control plane's packets are
  untouched unless the scope names them.

Revert removes the rules first (no packet is queued any more), then releases every held
packet at once and unbinds the queue. The rules pass packets when nobody listens
(``bypass``): if the agent dies, the traffic flows undelayed until the lease reverts
the rules by name.
"""

import contextlib
import hashlib
import os
from typing import Any

import structlog

from gameday.contract.backend import FaultRequest
from gameday.errors import FaultRejected
from gameday.kinds.net import NET_LATENCY, LatencyParams
from gameday.node.delays import DelaySampler
from gameday.node.host.base import HostFault
from gameday.node.host.net import DEFAULT_PREFIX, link_target, list_links, scoped_spec
from gameday.node.host.netns import in_netns
from gameday.node.host.netrules import NETEM, DropSpec, Mechanism, mechanism, rule_name
from gameday.node.host.nfqueue import Delayer, bound_queues, nfqueue_unavailable
from gameday.node.phases import PhaseRunner, hold_phases

__all__ = ["QUEUE_BASE", "QUEUE_SPAN", "LatencyFault", "handlers", "netem_args"]

log = structlog.get_logger("gameday.node.host.netdelay")

#: Queue numbers are drawn from this range (derived from the fault id, then the next
#: free one): clear of the low numbers other software tends to use.
QUEUE_BASE = 0x4000
QUEUE_SPAN = 0x4000
RULE_MECHANISMS = ("nftables", "iptables")
NFQUEUE_LAYER = "packet: a netfilter queue to the agent's userspace delayer"
NETEM_LAYER = "packet: a netem qdisc on the link's egress"


def netem_args(params: LatencyParams) -> list[str]:
    """netem's own arguments for ``params`` (``delay 20ms 5ms 25% distribution normal``)."""
    args = ["delay", f"{params.delay_ms:g}ms"]
    if params.jitter_ms > 0:
        args.append(f"{params.jitter_ms:g}ms")
        if params.correlation > 0:
            args.append(f"{params.correlation:g}%")
        if params.distribution == "normal":
            args += ["distribution", "normal"]
    return args


class LatencyFault:
    """``net.latency`` on a real link (or a namespace's links)."""

    kind = NET_LATENCY.name
    injected_at = "network"

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self._delayers: dict[str, Delayer] = {}
        self._runners: dict[str, PhaseRunner] = {}

    def _nfqueue_unavailable(self) -> str | None:
        reason = nfqueue_unavailable()
        if reason is not None:
            return reason
        try:
            mechanism("auto", allowed=RULE_MECHANISMS)
        except FaultRejected as exc:
            return str(exc)
        return None

    def unavailable(self) -> str | None:
        netem, nfqueue = NETEM.unavailable(), self._nfqueue_unavailable()
        if netem is None or nfqueue is None:
            return None
        return f"netem: {netem}; nfqueue: {nfqueue}"

    def _mechanism(self, params: LatencyParams, spec: DropSpec) -> str:
        netem_fits = (spec.link is not None and spec.peer is None and spec.port is None
                      and spec.direction == "egress")
        wanted = params.mechanism
        if wanted == "auto":
            wanted = "netem" if netem_fits and NETEM.unavailable() is None else "nfqueue"
        if wanted == "netem":
            reason = NETEM.unavailable()
            if reason is not None:
                raise FaultRejected(f"mechanism netem is unavailable: {reason}")
            if not netem_fits:
                raise FaultRejected("netem delays one link's egress: give link and "
                                    "direction: egress, no peer or port (or mechanism: "
                                    "nfqueue)")
            return "netem"
        reason = self._nfqueue_unavailable()
        if reason is not None:
            raise FaultRejected(f"mechanism nfqueue is unavailable: {reason}")
        return "nfqueue"

    def _checked(self, request: FaultRequest
                 ) -> tuple[str | None, LatencyParams, DropSpec, str]:
        """The netns, parameters, scope and mechanism of ``request``, every one checked;
        :class:`FaultRejected` otherwise. Changes nothing."""
        params = NET_LATENCY.backend_params(request.params)
        link, netns = link_target(request, link_required=False)
        spec = scoped_spec(params, link)
        return netns, params, spec, self._mechanism(params, spec)

    def check(self, request: FaultRequest) -> dict[str, Any]:
        """The interfaces :meth:`apply` would slow and how, read-only."""
        netns, _, spec, mech = self._checked(request)
        names = [spec.link] if spec.link else [str(item["name"]) for item in list_links(netns)]
        return {"interfaces": names, "netns": netns, "mechanism": mech, "peer": spec.peer,
                "port": spec.port, "direction": spec.direction}

    def _bind(self, fault_id: str, params: LatencyParams, netns: str | None) -> Delayer:
        """A started delayer on a free queue: the fault id's own number, else the next."""
        start = int(hashlib.sha256(fault_id.encode()).hexdigest(), 16) % QUEUE_SPAN
        taken = in_netns(netns, bound_queues) if netns else bound_queues()
        taken |= {d.queue for d in self._delayers.values() if d.netns == netns}
        last: FaultRejected | None = None
        for step in range(32):
            queue = QUEUE_BASE + (start + step) % QUEUE_SPAN
            if queue in taken:
                continue
            try:
                return Delayer(queue, DelaySampler.of(params), netns).start()
            except FaultRejected as exc:  # bound meanwhile by someone else: the next
                last = exc
        raise FaultRejected(f"no free netfilter queue near {QUEUE_BASE + start}"
                            + (f" ({last})" if last else ""))

    def _add_queue_rules(self, name: str, spec: DropSpec, netns: str | None) -> Mechanism:
        """The queue rules under ``name``: nftables, else iptables; the one that took."""
        errors = []
        for wanted in RULE_MECHANISMS:
            try:
                mech = mechanism(wanted, allowed=RULE_MECHANISMS)
            except FaultRejected as exc:
                errors.append(str(exc))
                continue
            try:
                mech.add_drop(name, spec, netns)
                return mech
            except FaultRejected as exc:  # e.g. a kernel without nft_queue
                with contextlib.suppress(FaultRejected):
                    mech.remove(name, netns, spec.link)
                errors.append(f"{wanted}: {exc}")
        raise FaultRejected("cannot queue packets: " + "; ".join(errors))

    def apply(self, fault_id: str, request: FaultRequest) -> dict[str, Any]:
        netns, params, spec, mech = self._checked(request)
        name = rule_name(self.prefix, fault_id)
        details: dict[str, Any] = {"mechanism": mech, "netns": netns, "link": spec.link,
                                   "delay_ms": params.delay_ms, "jitter_ms": params.jitter_ms,
                                   "distribution": params.distribution,
                                   "direction": spec.direction}
        if mech == "netem":
            assert spec.link is not None
            NETEM.add_delay(spec.link, netem_args(params), netns)
            details |= {"layer": NETEM_LAYER, "netem": " ".join(netem_args(params))}
        else:
            delayer = self._bind(fault_id, params, netns)
            queued = scoped_spec(params, spec.link, queue=delayer.queue)
            try:
                rules = self._add_queue_rules(name, queued, netns)
            except FaultRejected:
                delayer.stop()
                raise
            self._delayers[fault_id] = delayer
            details |= {"layer": NFQUEUE_LAYER, "queue": delayer.queue, "rules": name,
                        "rules_mechanism": rules.name, "hooks": queued.hooks}
        log.info("latency_added", fault_id=fault_id, **details)
        if params.duration_s is not None:
            def clear() -> None:  # the duration is over: as a revert, the runner kept
                self._clear(fault_id, request)

            self._runners[fault_id] = PhaseRunner(f"{self.kind}-{fault_id}",
                                                  hold_phases(params.duration_s),
                                                  on=lambda: None, off=clear).start()
        return details

    def _clear(self, fault_id: str, request: FaultRequest) -> dict[str, Any] | None:
        """Remove the rules (or qdisc), then release what is held; the delayer's stats."""
        netns = request.target.get("netns")
        link = request.target.get("link")
        link = link if isinstance(link, str) else None
        delayer = self._delayers.pop(fault_id, None)
        if not (netns and not os.path.exists(f"/run/netns/{netns}")):
            name = rule_name(self.prefix, fault_id)
            if delayer is None and link and self._used_netem(request):
                NETEM.remove(name, netns, link)  # its qdisc: refused over any other's
            for wanted in RULE_MECHANISMS:
                with contextlib.suppress(FaultRejected):
                    mechanism(wanted, allowed=RULE_MECHANISMS).remove(name, netns, link)
        return delayer.stop().to_json() if delayer is not None else None

    def _used_netem(self, request: FaultRequest) -> bool:
        """Whether ``request`` was served by netem (the choice is the parameters' and the
        host's, so an agent started again makes it the same way); a root netem qdisc
        that another fault or an administrator put on the link is never removed."""
        try:
            return self._checked(request)[3] == "netem"
        except FaultRejected:
            return False

    def revert(self, fault_id: str, request: FaultRequest) -> None:
        runner = self._runners.pop(fault_id, None)
        if runner is not None:
            runner.cancel()
        stats = self._clear(fault_id, request)
        if stats is not None:
            log.info("latency_reverted", fault_id=fault_id, **stats)

    def stats(self, fault_id: str) -> dict[str, Any] | None:
        """The delayer's counts so far (packets, held at most, CPU per packet), if any."""
        delayer = self._delayers.get(fault_id)
        return delayer.stats.to_json() if delayer is not None else None

    def inventory(self) -> dict[str, list[dict[str, Any]]]:
        """``packet_delay``: each mechanism and why it is unusable here (None: usable)."""
        return {"packet_delay": [{"name": "netem", "unavailable": NETEM.unavailable()},
                                 {"name": "nfqueue", "unavailable": self._nfqueue_unavailable()}]}


def handlers(prefix: str = DEFAULT_PREFIX) -> list[HostFault]:
    """The host's net.latency handler (``prefix`` names its rules)."""
    return [LatencyFault(prefix)]
