"""Shared plumbing of the node-level activities (links, services): pick the agent,
check the node blast radius, inject, revert. Errors are GamedayError; the activities
turn them into ActivityFailed."""

from typing import Any

from gameday import activity
from gameday.activity import AgentClient, check_nodes, pick_node
from gameday.kinds import Selector

__all__ = ["check_nodes", "inject_on_node", "inventory_of", "pick_node", "selector_mapping"]


def selector_mapping(selector: Any, selects: Selector) -> dict[str, Any]:
    """A selector as its kind's declaration checks it (known keys, their types, nested
    selectors), as a mapping; None is an empty selector."""
    if selector is None:
        return {}
    selects.check(selector, selects.argument)
    return dict(selector)


def inventory_of(client: AgentClient) -> dict[str, Any]:
    inventory = client.inventory()
    return inventory if isinstance(inventory, dict) else {}


def inject_on_node(kind: str, action: str, node_selector: Any, where: str,
                   target_for: Any, params: dict[str, Any],
                   lease_s: float | None) -> dict[str, Any]:
    """Resolve the node, check the blast radius, inject through its agent
    (:func:`gameday.activity.inject_on_node`).

    ``target_for(client) -> dict`` builds (and checks) the agent-side target.
    """
    run_target = activity.target()
    node = pick_node(run_target, node_selector, where, kind)
    agent_target = target_for(run_target.agent(node))
    entry = activity.inject_on_node(kind, node=node, target=agent_target, params=params,
                                    action=action, lease_s=lease_s, where=where)
    return activity.applied([entry])
