"""Packet rules of our own: drop (all or a random share) and redirect, with nftables or
iptables, and loss with ``tc netem``, each removable exactly.

Every fault gets names derived from its id (:func:`rule_name`), so a revert needs
nothing but the fault id, also after an agent restart: the nftables table
``inet PREFIX_ID``, the iptables chains ``PREFIX-ID-in`` / ``PREFIX-ID-out`` (jumped
to from ``INPUT`` / ``OUTPUT``; ``nat`` chains for redirects), or a ``netem`` root
qdisc on the interface. Commands run in a network namespace with ``ip netns exec``.
nftables rules go through nft's JSON interface; iptables gets its values as argv items;
interface names are checked by the kernel's rules first (:func:`check_ifname`).
"""

import ipaddress
import json
import os
import re
import shutil
import subprocess
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gameday.errors import FaultRejected

__all__ = ["NETEM", "DropSpec", "Mechanism", "RedirectSpec", "available_mechanisms", "check_ifname",
           "mechanism", "netem_unavailable", "rule_name", "run"]

MECHANISMS = ("nftables", "iptables", "netem")


@dataclass(frozen=True)
class DropSpec:
    """Which packets to drop: all matching (``share`` 1.0) or a random share of them;
    with ``queue``, every matching packet goes to that netfilter queue instead (to a
    userspace delayer, :mod:`gameday.node.host.nfqueue`), and passes when no one
    listens on it (``bypass``)."""

    share: float = 1.0
    link: str | None = None
    peer: str | None = None
    port: int | None = None
    direction: str = "both"  # ingress | egress | both
    queue: int | None = None

    @property
    def hooks(self) -> list[str]:
        return {"ingress": ["in"], "egress": ["out"]}.get(self.direction, ["in", "out"])

    def family(self) -> int | None:
        return ipaddress.ip_network(self.peer, strict=False).version if self.peer else None


@dataclass(frozen=True)
class RedirectSpec:
    """Send new TCP connections to ``address:port`` to ``to_port`` on this host instead,
    except those carrying ``mark`` (the proxy's own)."""

    address: str
    port: int
    to_port: int
    mark: int


#: The kernel's IFNAMSIZ, less the terminating NUL.
IFNAME_MAX = 15


def check_ifname(name: object, field: str = "target.link") -> str:
    """``name`` if the kernel would accept it as an interface name (1..15 bytes, not
    ``.`` or ``..``, no ``/``, ``:``, whitespace, quotes or control characters), else
    :class:`FaultRejected`."""
    if not isinstance(name, str) or not name:
        raise FaultRejected(f"{field} must be an interface name, got {name!r}")
    if (len(name.encode()) > IFNAME_MAX or name in (".", "..")
            or not re.fullmatch(r"[A-Za-z0-9_.@+-]+", name)):
        raise FaultRejected(f"{field} {name!r} is not a valid interface name (1..15 of "
                            f"A-Z a-z 0-9 _ . @ + -)")
    return name


def rule_name(prefix: str, fault_id: str) -> str:
    """``PREFIX_abcdef012345``: a name nftables and iptables (28 chars) both accept."""
    clean = re.sub(r"[^A-Za-z0-9]", "", fault_id)[-12:]
    return f"{prefix}_{clean}"[:22]


def run(argv: Sequence[str], netns: str | None = None, *, stdin: str | None = None,
        check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run a command (in ``netns``); ``FaultRejected`` with its stderr when it fails."""
    full = ["ip", "netns", "exec", netns, *argv] if netns else list(argv)
    try:
        done = subprocess.run(full, input=stdin, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise FaultRejected(f"{argv[0]}: {exc}") from None
    if check and done.returncode != 0:
        error = (done.stderr or done.stdout).strip().splitlines()
        raise FaultRejected(f"{' '.join(argv[:3])}: {error[-1] if error else done.returncode}")
    return done


class Mechanism(ABC):
    """One way of installing rules; ``unavailable()`` says why it cannot be used here."""

    name = ""

    @abstractmethod
    def unavailable(self) -> str | None: ...

    @abstractmethod
    def add_drop(self, name: str, spec: DropSpec, netns: str | None) -> None: ...

    def add_redirect(self, name: str, spec: RedirectSpec, netns: str | None) -> None:
        raise FaultRejected(f"{self.name} cannot redirect connections")

    @abstractmethod
    def remove(self, name: str, netns: str | None, link: str | None = None) -> None:
        """Remove what ``add_*`` added under ``name`` (idempotent)."""

    @abstractmethod
    def present(self, name: str, netns: str | None, link: str | None = None) -> bool: ...


def _ip_keyword(version: int | None) -> str:
    return "ip6" if version == 6 else "ip"


def _match(op: str, left: dict[str, Any], right: Any) -> dict[str, Any]:
    return {"match": {"op": op, "left": left, "right": right}}


def _nft_json(commands: list[dict[str, Any]], netns: str | None) -> None:
    """Apply ``commands`` in one transaction through nft's JSON interface (``nft -j -f
    -``): values are data, never pasted into a script, so a name cannot add statements."""
    run(["nft", "-j", "-f", "-"], netns, stdin=json.dumps({"nftables": commands}))


class Nftables(Mechanism):
    name = "nftables"

    def unavailable(self) -> str | None:
        if shutil.which("nft") is None:
            return "nft is not installed (apt-get install nftables)"
        done = subprocess.run(["nft", "list", "tables"], capture_output=True, text=True)
        if done.returncode != 0:
            return f"nft cannot list tables: {done.stderr.strip() or done.returncode}"
        return None

    @staticmethod
    def _matches(spec: DropSpec, hook: str) -> list[list[dict[str, Any]]]:
        """The match expressions (libnftables JSON) of each rule for ``hook``."""
        base: list[dict[str, Any]] = []
        if spec.link:
            base.append(_match("==", {"meta": {"key": "iifname" if hook == "in"
                                               else "oifname"}}, spec.link))
        if spec.peer:
            network = ipaddress.ip_network(spec.peer, strict=False)
            right: Any = str(network.network_address)
            if network.prefixlen != network.max_prefixlen:
                right = {"prefix": {"addr": right, "len": network.prefixlen}}
            base.append(_match("==", {"payload": {"protocol": _ip_keyword(network.version),
                                                  "field": "saddr" if hook == "in"
                                                  else "daddr"}}, right))
        if spec.port is None:
            return [base]
        l4 = _match("==", {"meta": {"key": "l4proto"}}, {"set": ["tcp", "udp"]})
        return [[*base, l4, _match("==", {"payload": {"protocol": "th", "field": side}},
                                   spec.port)]
                for side in ("sport", "dport")]

    def add_drop(self, name: str, spec: DropSpec, netns: str | None) -> None:
        verdict: list[dict[str, Any]] = [{"drop": None}]
        if spec.queue is not None:
            verdict = [{"queue": {"num": spec.queue, "flags": "bypass"}}]
        elif spec.share < 1.0:
            verdict = [_match("<", {"numgen": {"mode": "random", "mod": 10000}},
                              round(spec.share * 10000)), {"drop": None}]
        commands: list[dict[str, Any]] = [{"add": {"table": {"family": "inet", "name": name}}}]
        for hook in spec.hooks:
            commands.append({"add": {"chain": {
                "family": "inet", "table": name, "name": hook, "type": "filter",
                "hook": "input" if hook == "in" else "output", "prio": -10,
                "policy": "accept"}}})
            commands += [{"add": {"rule": {"family": "inet", "table": name, "chain": hook,
                                           "expr": match + verdict}}}
                         for match in self._matches(spec, hook)]
        _nft_json(commands, netns)

    def add_redirect(self, name: str, spec: RedirectSpec, netns: str | None) -> None:
        family = _ip_keyword(ipaddress.ip_address(spec.address).version)
        rule = [_match("!=", {"meta": {"key": "mark"}}, spec.mark),
                _match("==", {"payload": {"protocol": family, "field": "daddr"}},
                       str(ipaddress.ip_address(spec.address))),
                _match("==", {"payload": {"protocol": "tcp", "field": "dport"}}, spec.port),
                {"redirect": {"port": spec.to_port}}]
        commands: list[dict[str, Any]] = [{"add": {"table": {"family": family, "name": name}}}]
        for chain, hook in (("out", "output"), ("pre", "prerouting")):
            commands.append({"add": {"chain": {"family": family, "table": name, "name": chain,
                                               "type": "nat", "hook": hook, "prio": -110,
                                               "policy": "accept"}}})
            commands.append({"add": {"rule": {"family": family, "table": name, "chain": chain,
                                              "expr": rule}}})
        _nft_json(commands, netns)

    def _tables(self, netns: str | None) -> list[tuple[str, str]]:
        done = run(["nft", "list", "tables"], netns, check=False)
        found = []
        for line in done.stdout.splitlines():
            parts = line.split()
            if len(parts) == 3 and parts[0] == "table":
                found.append((parts[1], parts[2]))
        return found

    def present(self, name: str, netns: str | None, link: str | None = None) -> bool:
        return any(table == name for _, table in self._tables(netns))

    def remove(self, name: str, netns: str | None, link: str | None = None) -> None:
        for family, table in self._tables(netns):
            if table == name:
                run(["nft", "delete", "table", family, table], netns)


class Iptables(Mechanism):
    name = "iptables"

    def unavailable(self) -> str | None:
        if shutil.which("iptables") is None:
            return "iptables is not installed (apt-get install iptables)"
        done = subprocess.run(["iptables", "-S", "INPUT"], capture_output=True, text=True)
        if done.returncode != 0:
            return f"iptables cannot list rules: {done.stderr.strip() or done.returncode}"
        return None

    @staticmethod
    def _binaries(version: int | None) -> list[str]:
        if version == 6:
            return ["ip6tables"]
        if version == 4 or shutil.which("ip6tables") is None:
            return ["iptables"]
        return ["iptables", "ip6tables"]

    @staticmethod
    def _chains(name: str) -> dict[str, tuple[str, str]]:
        """hook -> (table, builtin chain) for each of our chains."""
        return {f"{name}-in": ("filter", "INPUT"), f"{name}-out": ("filter", "OUTPUT"),
                f"{name}-nat-out": ("nat", "OUTPUT"), f"{name}-nat-pre": ("nat", "PREROUTING")}

    def add_drop(self, name: str, spec: DropSpec, netns: str | None) -> None:
        for binary in self._binaries(spec.family()):
            try:
                for hook in spec.hooks:
                    chain = f"{name}-{hook}"
                    run([binary, "-w", "-N", chain], netns)
                    for match in self._matches(spec, hook):
                        run([binary, "-w", "-A", chain, *match, *self._verdict(spec)], netns)
                    run([binary, "-w", "-I", "INPUT" if hook == "in" else "OUTPUT", "1",
                         "-j", chain], netns)
            except FaultRejected:
                self.remove(name, netns)
                raise

    @staticmethod
    def _verdict(spec: DropSpec) -> list[str]:
        if spec.queue is not None:
            return ["-j", "NFQUEUE", "--queue-num", str(spec.queue), "--queue-bypass"]
        if spec.share >= 1.0:
            return ["-j", "DROP"]
        return ["-m", "statistic", "--mode", "random", "--probability",
                f"{spec.share:.6f}", "-j", "DROP"]

    @staticmethod
    def _matches(spec: DropSpec, hook: str) -> list[list[str]]:
        base: list[str] = []
        if spec.link:
            base += ["-i" if hook == "in" else "-o", spec.link]
        if spec.peer:
            base += ["-s" if hook == "in" else "-d", spec.peer]
        if spec.port is None:
            return [base]
        return [[*base, "-p", proto, flag, str(spec.port)]
                for proto in ("tcp", "udp") for flag in ("--sport", "--dport")]

    def add_redirect(self, name: str, spec: RedirectSpec, netns: str | None) -> None:
        binary = self._binaries(ipaddress.ip_address(spec.address).version)[0]
        rule = ["-p", "tcp", "-d", spec.address, "--dport", str(spec.port), "-m", "mark",
                "!", "--mark", str(spec.mark), "-j", "REDIRECT", "--to-ports", str(spec.to_port)]
        try:
            for chain, builtin in ((f"{name}-nat-out", "OUTPUT"), (f"{name}-nat-pre",
                                                                   "PREROUTING")):
                run([binary, "-w", "-t", "nat", "-N", chain], netns)
                run([binary, "-w", "-t", "nat", "-A", chain, *rule], netns)
                run([binary, "-w", "-t", "nat", "-I", builtin, "1", "-j", chain], netns)
        except FaultRejected:
            self.remove(name, netns)
            raise

    def present(self, name: str, netns: str | None, link: str | None = None) -> bool:
        for binary in self._binaries(None):
            for chain, (table, _) in self._chains(name).items():
                if run([binary, "-w", "-t", table, "-S", chain], netns, check=False
                       ).returncode == 0:
                    return True
        return False

    def remove(self, name: str, netns: str | None, link: str | None = None) -> None:
        for binary in self._binaries(None):
            for chain, (table, builtin) in self._chains(name).items():
                if run([binary, "-w", "-t", table, "-S", chain], netns, check=False
                       ).returncode != 0:
                    continue
                jump = [binary, "-w", "-t", table]
                while run([*jump, "-C", builtin, "-j", chain], netns, check=False
                          ).returncode == 0:
                    run([*jump, "-D", builtin, "-j", chain], netns)
                run([*jump, "-F", chain], netns)
                run([*jump, "-X", chain], netns)


def netem_unavailable() -> str | None:
    """Why ``tc netem`` cannot be used here, or None."""
    if shutil.which("tc") is None:
        return "tc is not installed (apt-get install iproute2)"
    release = os.uname().release
    loaded = Path("/sys/module/sch_netem").exists()
    module = any(Path(f"/lib/modules/{release}").glob("kernel/net/sched/sch_netem.ko*"))
    if not (loaded or module):
        return (f"tc netem is not available: kernel {release} has no sch_netem module "
                f"(not loaded, none under /lib/modules/{release})")
    return None


class Netem(Mechanism):
    """Loss with a ``netem`` root qdisc on the interface (egress only, all packets)."""

    name = "netem"

    def unavailable(self) -> str | None:
        return netem_unavailable()

    def add_drop(self, name: str, spec: DropSpec, netns: str | None) -> None:
        if (not spec.link or spec.peer or spec.port or spec.direction == "ingress"
                or spec.queue is not None):
            raise FaultRejected("netem drops on one link's egress: give link only, no peer, "
                                "port or ingress direction")
        self._check_root(spec.link, netns)
        run(["tc", "qdisc", "add", "dev", spec.link, "root", "netem", "loss",
             f"{spec.share * 100:.4f}%"], netns)

    def add_delay(self, link: str, netem_args: Sequence[str], netns: str | None) -> None:
        """A ``netem delay`` root qdisc on ``link``'s egress: ``netem_args`` are netem's
        own (``delay 20ms 5ms 25% distribution normal``)."""
        self._check_root(link, netns)
        run(["tc", "qdisc", "add", "dev", link, "root", "netem", *netem_args], netns)

    def _check_root(self, link: str, netns: str | None) -> None:
        shown = run(["tc", "qdisc", "show", "dev", link, "root"], netns).stdout
        if shown.strip() and not re.search(r"qdisc (noqueue|pfifo_fast|fq_codel|mq) ", shown):
            raise FaultRejected(f"{link} already has a root qdisc ({shown.split()[1]}); "
                                f"netem would replace it")

    def present(self, name: str, netns: str | None, link: str | None = None) -> bool:
        if not link:
            return False
        shown = run(["tc", "qdisc", "show", "dev", link, "root"], netns, check=False).stdout
        return " netem " in f" {shown} "

    def remove(self, name: str, netns: str | None, link: str | None = None) -> None:
        if link and self.present(name, netns, link):
            run(["tc", "qdisc", "del", "dev", link, "root"], netns)


NETEM = Netem()
_ALL: dict[str, Mechanism] = {m.name: m for m in (Nftables(), Iptables(), NETEM)}


def available_mechanisms() -> dict[str, str | None]:
    """Each mechanism with None (usable) or why not."""
    return {name: mech.unavailable() for name, mech in _ALL.items()}


def mechanism(wanted: str, *, allowed: Sequence[str] = MECHANISMS) -> Mechanism:
    """The mechanism to use: ``auto`` picks the first usable of ``allowed``."""
    if wanted != "auto":
        if wanted not in allowed:
            raise FaultRejected(f"params.mechanism must be auto or one of "
                                f"{', '.join(allowed)}, got {wanted!r}")
        reason = _ALL[wanted].unavailable()
        if reason is not None:
            raise FaultRejected(f"mechanism {wanted} is unavailable: {reason}")
        return _ALL[wanted]
    reasons = []
    for name in allowed:
        reason = _ALL[name].unavailable()
        if reason is None:
            return _ALL[name]
        reasons.append(f"{name}: {reason}")
    raise FaultRejected("no packet filter is usable here (" + "; ".join(reasons) + ")")


def all_mechanisms() -> list[Mechanism]:
    return list(_ALL.values())
