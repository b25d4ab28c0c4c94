"""Shared plumbing of the node-level activities (links, services): pick the agent,
check the node blast radius, inject, revert. Errors are GamedayError; the activities
turn them into ActivityFailed."""

from collections.abc import Mapping
from typing import Any

from gameday.engine import session as sessions
from gameday.engine.agent_client import AgentClient
from gameday.engine.session import Session
from gameday.errors import BlastRadiusExceeded, InvalidInput
from gameday.targets.base import Target


def selector_mapping(selector: Any, where: str, known: tuple[str, ...]) -> dict[str, Any]:
    """A selector as a mapping of known keys (None allowed: an empty selector)."""
    if selector is None:
        return {}
    if not isinstance(selector, Mapping):
        raise InvalidInput(f"must be a mapping ({', '.join(known)}), got {selector!r}",
                           path=where)
    for key in selector:
        if key not in known:
            raise InvalidInput(f"unknown key (known: {', '.join(known)})", path=f"{where}.{key}")
    return dict(selector)


def pick_node(target: Target, node: Any, where: str, kind: str) -> str:
    """The node named in a selector, or the only node (of those that can apply ``kind``)."""
    if node is not None:
        if not isinstance(node, str) or node not in target.agents:
            raise InvalidInput(f"no node {node!r} in target {target.kind} (nodes: "
                               f"{', '.join(sorted(target.agents)) or 'none'})",
                               path=f"{where}.node")
        return node
    able = [name for name, client in sorted(target.agents.items())
            if kind in client.inventory().get("kinds", {})]
    if len(able) == 1:
        return able[0]
    raise InvalidInput(f"name the node: {len(able)} nodes can apply {kind} "
                       f"({', '.join(able) or 'none'})", path=f"{where}.node")


def inventory_of(client: AgentClient) -> dict[str, Any]:
    inventory = client.inventory()
    return inventory if isinstance(inventory, dict) else {}


def check_nodes(session: Session, node: str) -> None:
    """Refuse a fault that would take the run past ``blast_radius.max_nodes``."""
    limit = session.extension.blast_radius.max_nodes
    nodes = {entry.node for entry in session.ledger} | {node}
    if limit is not None and len(nodes) > limit:
        raise BlastRadiusExceeded(f"{len(nodes)} nodes would be faulted, blast_radius.max_nodes "
                                  f"is {limit}; nothing injected")


def inject_on_node(kind: str, action: str, node_selector: Any, where: str,
                   target_for: Any, params: dict[str, Any],
                   lease_s: float | None) -> dict[str, Any]:
    """Resolve the node, check the blast radius, inject through its agent.

    ``target_for(client) -> dict`` builds (and checks) the agent-side target.
    """
    session = sessions.current()
    target = session.require_target()
    node = pick_node(target, node_selector, where, kind)
    client = target.agent(node)
    agent_target = target_for(client)
    check_nodes(session, node)
    entry = session.inject(node=node, kind=kind, target=agent_target, params=params,
                           action=action, lease_s=lease_s)
    return {"faults": [{"id": entry.id, "node": node, "target": entry.target,
                        "injected_at": entry.injected_at, "applied_at": entry.applied_at,
                        "expires_at": entry.expires_at, "details": entry.details}]}
