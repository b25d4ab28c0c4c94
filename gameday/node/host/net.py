"""Real network faults on a host: link flaps through netlink, loss and partitions through
packet rules of their own.

Targets: ``{"link": "eth0"}`` (optional for loss and partitions), ``{"netns": NAME}``
for a network namespace (``/run/netns/NAME``, e.g. a pod's or a test's).

- ``net.link_flap``: ``down_s`` / ``up_s`` / ``count`` down/up schedule on the interface
  (pyroute2 ``link set state down|up``). The interface is brought up after the
  schedule and on every revert (also a revert after an agent restart). Refused for
  ``lo`` and for an interface that is already down.
- ``net.loss`` (``percent``) and ``net.partition``: drop rules scoped by ``link``,
  ``peer``, ``port`` and ``direction``, in an nftables table or iptables chains named
  after the fault (:mod:`gameday.node.host.netrules`); ``mechanism: netem`` uses a
  ``tc netem`` root qdisc where the kernel has it. ``duration_s`` ends the effect
  early; revert removes exactly what was added.

The inventory lists the host's links (name, state, mtu) and its packet filters
(``packet_filters``: nftables, iptables, netem, each with why it is unusable, or null).
"""

import contextlib
import ipaddress
import os
import re
from collections.abc import Callable
from typing import Any

import structlog

from gameday.contract.backend import FaultRequest
from gameday.errors import FaultRejected
from gameday.kinds.net import (
    NET_LINK_FLAP,
    NET_LOSS,
    NET_PARTITION,
    LatencyParams,
    LossParams,
    PartitionParams,
)
from gameday.node.host.base import HostFault
from gameday.node.host.netns import route
from gameday.node.host.netrules import (
    DropSpec,
    all_mechanisms,
    available_mechanisms,
    check_ifname,
    mechanism,
    rule_name,
)
from gameday.node.phases import Phase, PhaseRunner, flap_phases, hold_phases

__all__ = ["DEFAULT_PREFIX", "DropRulesFault", "LinkFlapFault", "handlers", "link_target",
           "list_links", "scoped_spec"]

log = structlog.get_logger("gameday.node.host.net")

DEFAULT_PREFIX = "gameday"
IFF_UP = 0x1


def _ipr(netns: str | None) -> Any:
    return route(netns or None)


def list_links(netns: str | None = None) -> list[dict[str, Any]]:
    """``[{"name", "state", "mtu", "admin_up"}]`` for every interface."""
    with _ipr(netns) as ipr:
        return [{"name": link.get("ifname"), "state": str(link.get("operstate")).lower(),
                 "mtu": link.get("mtu"), "admin_up": bool(link["flags"] & IFF_UP)}
                for link in ipr.get_links()]


def link_target(request: FaultRequest, *, link_required: bool) -> tuple[str | None, str | None]:
    link = request.target.get("link")
    netns = request.target.get("netns")
    unknown = set(request.target) - {"link", "netns"}
    if unknown:
        raise FaultRejected(f"target.{sorted(unknown)[0]} is unknown (known: link, netns)")
    if link_required and not link:
        raise FaultRejected("target.link (an interface name) is required")
    if link is not None:
        check_ifname(link)
    if netns is not None and (not isinstance(netns, str) or not netns
                              or not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", netns)
                              or netns in (".", "..")):
        raise FaultRejected(f"target.netns must be a namespace name, got {netns!r}")
    if netns is not None and not os.path.exists(f"/run/netns/{netns}"):
        raise FaultRejected(f"target.netns {netns!r}: no /run/netns/{netns}")
    return link, netns


def _netlink_unavailable() -> str | None:
    try:
        with _ipr(None) as ipr:
            ipr.get_links()
    except ImportError:
        return "pyroute2 is not installed (pip install 'gameday[host]')"
    except OSError as exc:
        return f"netlink is not usable: {exc}"
    if os.geteuid() != 0:
        return "setting links down needs root (CAP_NET_ADMIN)"
    return None


def scoped_spec(params: LossParams | PartitionParams | LatencyParams, link: str | None, *,
                share: float = 1.0, queue: int | None = None) -> DropSpec:
    """The packets a scoped net kind acts on (``link``, ``peer``, ``port``,
    ``direction``); :class:`FaultRejected` for a peer that is no address or CIDR."""
    peer = params.peer
    if peer is not None:
        try:
            peer = str(ipaddress.ip_network(peer, strict=False))
        except ValueError:
            raise FaultRejected(f"params.peer must be an IP address or CIDR, "
                                f"got {params.peer!r}") from None
    return DropSpec(share=share, link=link, peer=peer, port=params.port,
                    direction=params.direction or "both", queue=queue)


class LinkFlapFault:
    """``net.link_flap`` on a real interface."""

    kind = "net.link_flap"
    injected_at = "network"

    def __init__(self) -> None:
        self._runners: dict[str, PhaseRunner] = {}

    def unavailable(self) -> str | None:
        return _netlink_unavailable()

    def _set(self, link: str, netns: str | None, up: bool) -> None:
        with _ipr(netns) as ipr:
            found = ipr.link_lookup(ifname=link)
            if not found:
                raise FaultRejected(f"no interface {link!r}"
                                    + (f" in netns {netns}" if netns else ""))
            ipr.link("set", index=found[0], state="up" if up else "down")
        log.info("link_set", link=link, netns=netns, state="up" if up else "down")

    def _checked(self, request: FaultRequest
                 ) -> tuple[str, str | None, dict[str, Any], list[Phase]]:
        """The link, its netns, its state and the flap's phases, once every parameter is
        checked and the link is up; :class:`FaultRejected` otherwise. Changes nothing."""
        link, netns = link_target(request, link_required=True)
        assert link is not None
        if link == "lo":
            raise FaultRejected("target.link lo: refusing to take the loopback down")
        flap = NET_LINK_FLAP.backend_params(request.params)
        state = {item["name"]: item for item in list_links(netns)}.get(link)
        if state is None:
            raise FaultRejected(f"no interface {link!r}" + (f" in netns {netns}" if netns else ""))
        if not state["admin_up"]:
            raise FaultRejected(f"interface {link} is already down; nothing to flap")
        return link, netns, state, flap_phases(flap.down_s, flap.up_s, flap.count)

    def check(self, request: FaultRequest) -> dict[str, Any]:
        """The interface :meth:`apply` would flap, read-only: ``{"interfaces": [link]}``."""
        link, netns, _, _ = self._checked(request)
        return {"interfaces": [link], "netns": netns}

    def apply(self, fault_id: str, request: FaultRequest) -> dict[str, Any]:
        link, netns, state, phases = self._checked(request)
        self._set(link, netns, up=False)  # the first down now, so errors surface here
        runner = PhaseRunner(f"flap-{fault_id}", phases,
                             on=lambda: self._set(link, netns, up=False),
                             off=lambda: self._set(link, netns, up=True))
        self._runners[fault_id] = runner.start()
        return {"link": link, "netns": netns, "mtu": state["mtu"],
                "schedule_s": round(sum(p.seconds or 0 for p in phases), 3)}

    def revert(self, fault_id: str, request: FaultRequest) -> None:
        runner = self._runners.pop(fault_id, None)
        if runner is not None:
            runner.cancel()
        link, netns = request.target.get("link"), request.target.get("netns")
        if not link or (netns and not os.path.exists(f"/run/netns/{netns}")):
            return
        with contextlib.suppress(FaultRejected):  # the interface is gone: nothing to bring up
            self._set(str(link), netns, up=True)

    def inventory(self) -> dict[str, list[dict[str, Any]]]:
        try:
            links = list_links()
        except (ImportError, OSError):
            return {"links": []}
        return {"links": [{k: v for k, v in item.items() if k != "admin_up"} for item in links]}


class DropRulesFault:
    """``net.loss`` or ``net.partition`` as packet rules of their own."""

    injected_at = "network"

    def __init__(self, kind: str, prefix: str = DEFAULT_PREFIX) -> None:
        self.kind = kind
        self.prefix = prefix
        self.allowed = (("nftables", "iptables", "netem") if kind == "net.loss"
                        else ("nftables", "iptables"))
        self._runners: dict[str, PhaseRunner] = {}

    def unavailable(self) -> str | None:
        try:
            mechanism("auto", allowed=self.allowed)
        except FaultRejected as exc:
            return str(exc)
        return None

    def _spec(self, params: LossParams | PartitionParams, link: str | None) -> DropSpec:
        share = params.percent / 100.0 if isinstance(params, LossParams) else 1.0
        spec = scoped_spec(params, link, share=share)
        if self.kind == "net.partition" and not (spec.peer or spec.port or link):
            raise FaultRejected("net.partition needs a peer, a port or a link: refusing to "
                                "cut the host off entirely")
        return spec

    def _checked(self, request: FaultRequest
                 ) -> tuple[str | None, str | None, DropSpec, float | None, Any]:
        """The link, netns, rules, duration and mechanism of ``request``, every
        parameter checked; :class:`FaultRejected` otherwise. Changes nothing."""
        params = (NET_LOSS if self.kind == NET_LOSS.name else NET_PARTITION).backend_params(
            request.params)
        link, netns = link_target(request, link_required=False)
        spec = self._spec(params, link)
        duration = params.duration_s
        mech = mechanism(params.mechanism, allowed=self.allowed)
        return link, netns, spec, duration, mech

    def check(self, request: FaultRequest) -> dict[str, Any]:
        """The interfaces :meth:`apply`'s rules would drop on, read-only (every one of
        the namespace when no link is named)."""
        link, netns, spec, _, mech = self._checked(request)
        names = [link] if link else [str(item["name"]) for item in list_links(netns)]
        return {"interfaces": names, "netns": netns, "mechanism": mech.name,
                "peer": spec.peer, "port": spec.port}

    def apply(self, fault_id: str, request: FaultRequest) -> dict[str, Any]:
        link, netns, spec, duration, mech = self._checked(request)
        name = rule_name(self.prefix, fault_id)
        mech.add_drop(name, spec, netns)
        log.info("drop_rules_added", kind=self.kind, name=name, mechanism=mech.name,
                 netns=netns, share=spec.share)
        if duration is not None:
            remove: Callable[[], None] = lambda: mech.remove(name, netns, link)  # noqa: E731
            self._runners[fault_id] = PhaseRunner(f"{self.kind}-{fault_id}",
                                                  hold_phases(duration), on=lambda: None,
                                                  off=remove).start()
        return {"mechanism": mech.name, "rules": name, "netns": netns, "link": link,
                "share": spec.share, "hooks": spec.hooks}

    def revert(self, fault_id: str, request: FaultRequest) -> None:
        runner = self._runners.pop(fault_id, None)
        if runner is not None:
            runner.cancel()
        netns = request.target.get("netns")
        if netns and not os.path.exists(f"/run/netns/{netns}"):
            return  # the namespace is gone, and its rules with it
        link = request.target.get("link")
        name = rule_name(self.prefix, fault_id)
        for mech in all_mechanisms():
            if mech.unavailable() is None:
                mech.remove(name, netns, link if isinstance(link, str) else None)

    def inventory(self) -> dict[str, list[dict[str, Any]]]:
        """``packet_filters``: each mechanism and why it is unusable here (None: usable)."""
        return {"packet_filters": [{"name": name, "unavailable": reason}
                                   for name, reason in available_mechanisms().items()]}


def handlers(prefix: str = DEFAULT_PREFIX) -> list[HostFault]:
    """The host's net.* handlers (``prefix`` names their tables and chains)."""
    return [LinkFlapFault(), DropRulesFault("net.loss", prefix),
            DropRulesFault("net.partition", prefix)]
