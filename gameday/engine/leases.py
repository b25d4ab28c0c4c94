"""The lease renewer: keeps every active fault's lease alive while the run lives.

If the orchestrator dies, renewals stop and each agent reverts its faults when their
leases expire. A renewal answered ``410`` means the agent already reverted the fault;
the ledger records that as ``lost``. A renewal answered ``423 halted`` means the agent's
safety lever is engaged (it reverted everything it held): ``on_halt`` is told, with one
line naming the lever, and the run stops (:meth:`gameday.engine.session.Session.stop`).
"""

import threading
from collections.abc import Callable, Mapping
from typing import Protocol

import structlog

from gameday.clock import SYSTEM_CLOCK, Clock
from gameday.errors import AgentError, GamedayError
from gameday.evidence.ledger import FaultEntry, Ledger
from gameday.wire.agent_client import AgentClient, AgentHalted, LeaseLost
from gameday.wire.protocol import MAX_BATCH_ITEMS

log = structlog.get_logger("gameday.engine.leases")


class FaultRoute(Protocol):
    """Renews and reverts faults applied other than through an agent (``entry.via``)."""

    via: str

    def renew(self, entry: FaultEntry) -> float | None:
        """The new expiry, or ``None`` when the fault is already gone (lease lost)."""
        ...

    def revert(self, entry: FaultEntry) -> tuple[float, str]:
        """Undo the fault; returns (reverted_at, reason)."""
        ...


class LeaseRenewer:
    """Renews each active fault once a third of its lease has passed."""

    def __init__(self, ledger: Ledger, clients: dict[str, AgentClient], *,
                 clock: Clock = SYSTEM_CLOCK, tick_s: float = 0.2,
                 routes: Mapping[str, FaultRoute] | None = None) -> None:
        self.ledger = ledger
        self.clients = clients
        self.routes = routes if routes is not None else {}
        self.clock = clock
        self.tick_s = tick_s
        self.on_halt: Callable[[str], None] | None = None  # told when an agent is halted
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="lease-renewer", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def renew_due(self) -> None:
        """Renew every active fault whose lease is more than a third gone; an agent's due
        faults (of one lease length) in one request when there are several."""
        now = self.clock.now()
        per_agent: dict[tuple[str, float], list[FaultEntry]] = {}
        for entry in self.ledger.active():
            if entry.expires_at - now <= entry.lease_s * 2 / 3:
                if entry.via == "agent" and entry.node in self.clients:
                    per_agent.setdefault((entry.node, entry.lease_s), []).append(entry)
                else:
                    self._renew(entry)
        for (node, lease_s), entries in per_agent.items():
            if len(entries) == 1:  # one fault: the plain renew
                self._renew(entries[0])
                continue
            for start in range(0, len(entries), MAX_BATCH_ITEMS):
                self._renew_many(self.clients[node], entries[start:start + MAX_BATCH_ITEMS],
                                 lease_s)

    def _renew_many(self, client: AgentClient, entries: list[FaultEntry],
                    lease_s: float) -> None:
        try:
            result = client.renew_many([entry.id for entry in entries], lease_s, minimal=True)
        except AgentHalted as exc:
            self._halted(entries[0].node, exc)
            return
        except AgentError as exc:
            log.warning("lease renewal failed", faults=len(entries), error=str(exc))
            return
        renewed: list[tuple[str, float]] = []
        for entry in entries:
            fault, error = result.done.get(entry.id), result.failed.get(entry.id)
            if fault is not None:
                renewed.append((entry.id, float(fault["expires_at"])))
            elif isinstance(error, LeaseLost):
                self.ledger.record_reverted(entry.id, self.clock.now(), "lease-lost")
                log.warning("lease lost", fault=entry.id, kind=entry.kind, error=str(error))
            else:
                log.warning("lease renewal failed", fault=entry.id, error=str(error))
        self.ledger.record_renewed_many(renewed)

    def _renew(self, entry: FaultEntry) -> None:
        if entry.via != "agent":
            self._renew_routed(entry)
            return
        client = self.clients.get(entry.node)
        if client is None:
            return
        try:
            fault = client.renew(entry.id, entry.lease_s)
        except LeaseLost as lost:
            self.ledger.record_reverted(entry.id, self.clock.now(), "lease-lost")
            log.warning("lease lost", fault=entry.id, kind=entry.kind, error=str(lost))
        except AgentHalted as exc:
            self._halted(entry.node, exc)
        except AgentError as exc:
            log.warning("lease renewal failed", fault=entry.id, error=str(exc))
        else:
            self.ledger.record_renewed(entry.id, float(fault["expires_at"]))

    def _halted(self, node: str, exc: AgentHalted) -> None:
        halt = exc.halt
        line = (f"the safety lever of node {node} is engaged by "
                f"{halt.get('engaged_by') or 'unknown'} ({halt.get('source', 'api')}): "
                f"{halt.get('reason') or 'no reason given'}")
        log.warning("safety lever engaged", node=node, lever=halt)
        if self.on_halt is not None:
            self.on_halt(line)

    def _renew_routed(self, entry: FaultEntry) -> None:
        route = self.routes.get(entry.via)
        if route is None:
            return
        try:
            expires_at = route.renew(entry)
        except GamedayError as exc:
            log.warning("lease renewal failed", fault=entry.id, via=entry.via, error=str(exc))
            return
        if expires_at is None:
            self.ledger.record_reverted(entry.id, self.clock.now(), "lease-lost")
            log.warning("lease lost", fault=entry.id, kind=entry.kind, via=entry.via)
        else:
            self.ledger.record_renewed(entry.id, expires_at)

    def _loop(self) -> None:
        # A failed renewal is retried on the next tick (the fault is still due); nothing
        # an agent answers may end this thread while the run lives.
        while not self._stop.wait(self.tick_s):
            try:
                self.renew_due()
            except Exception:
                log.exception("lease renewal round failed; retrying")
