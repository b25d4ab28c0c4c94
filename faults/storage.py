"""Storage fault actions (Chaos Toolkit activities): a stalled, failing or slow filesystem.

``storage`` selects the filesystem: ``{mount: store}`` names a mount an agent lists in
its inventory (the lab's weight and checkpoint store, on every lab node), or
``{path: /var/lib/ckpt, node: NAME}`` a directory on a host, which the agent layers
the fault filesystem over (a FUSE passthrough) for as long as the fault lasts. Every
action checks its arguments against the catalogue, checks ``blast_radius.max_nodes``,
and injects through the node's agent under a lease; the ledger records it so
``revert`` (and the runner, always) undoes it. Reverting releases every operation the
fault was holding.
"""

from typing import Any

from faults._nodes import inventory_of, selector_mapping
from gameday import activity
from gameday.errors import InvalidInput
from gameday.kinds import KindParams, KindSpec
from gameday.kinds.storage import STORAGE_ERRORS, STORAGE_SELECTOR, STORAGE_SLOW, STORAGE_STALL

__all__ = ["errors", "revert", "revert_storage", "slow", "stall"]

_KEYS = STORAGE_SELECTOR.key_names


def stall(storage: dict[str, Any], ops: list[str] | None = None, within: str = "/",
          duration_s: float | None = None, mechanism: str = "fuse",
          lease_s: float | None = None) -> dict[str, Any]:
    """Hang the filesystem: every selected operation (``ops``, default all) under
    ``within`` blocks until the fault is reverted or ``duration_s`` passes, then proceeds.
    On a host, ``mechanism: freezer`` with ``storage: {pid: N}`` or ``{cgroup: DIR}``
    freezes those tasks (cgroup freezer, v1 or v2) instead.

    Lab: a shard that (re)starts cannot read its weights and never becomes ready; the
    trainer's checkpoints stop landing. Returns ``{"faults": [{"id", "node", "target",
    "injected_at", "applied_at", "expires_at", "details"}]}``.
    """
    params = activity.validated(STORAGE_STALL, {"ops": ops, "within": within,
                                                "duration_s": duration_s,
                                                "mechanism": mechanism})
    return _inject(STORAGE_STALL, "stall", storage, params, lease_s)


def errors(storage: dict[str, Any], errno: str = "EIO", percent: float = 100.0,
           ops: list[str] | None = None, within: str = "/", duration_s: float | None = None,
           lease_s: float | None = None) -> dict[str, Any]:
    """Fail ``percent`` % of the selected operations (default read, write, fsync) with
    ``errno`` (EIO, ENOSPC, EACCES, EROFS or EDQUOT).

    Lab: a shard that (re)starts fails to load its weights and exits; the controller
    retries it with back-off. ``ops: [write, create, fsync]`` with ``errno: ENOSPC`` is a
    full disk for a checkpoint writer.
    """
    params = activity.validated(STORAGE_ERRORS, {"errno": errno, "percent": percent, "ops": ops,
                                        "within": within, "duration_s": duration_s})
    return _inject(STORAGE_ERRORS, "errors", storage, params, lease_s)


def slow(storage: dict[str, Any], latency_ms: float, jitter_ms: float = 0.0,
         ops: list[str] | None = None, within: str = "/", duration_s: float | None = None,
         lease_s: float | None = None) -> dict[str, Any]:
    """Delay each selected operation (default all) by ``latency_ms`` plus a uniform
    random ``0..jitter_ms``. The kernel caches nothing on the fault filesystem, so every
    read and write of the application meets the delay."""
    params = activity.validated(STORAGE_SLOW, {"latency_ms": latency_ms, "jitter_ms": jitter_ms,
                                      "ops": ops, "within": within, "duration_s": duration_s})
    return _inject(STORAGE_SLOW, "slow", storage, params, lease_s)


def revert_storage() -> dict[str, Any]:
    """Revert only this run's storage faults (the stall lifts mid-method, the rest stays)."""
    with activity.failing():
        return {"reverted": activity.revert_kinds("storage.")}


def revert() -> dict[str, Any]:
    """Revert every fault this run applied (idempotent); fails if any could not be reverted."""
    return activity.revert_all()



def resolve_storage(selector: Any) -> tuple[str, dict[str, Any]]:
    """The node and the agent-side target (``{"mount": NAME}`` or ``{"path": P}``)."""
    chosen = selector_mapping(selector, STORAGE_SELECTOR)
    which = [key for key in _KEYS if key != "node" and key in chosen]
    if len(which) != 1:
        raise InvalidInput("give exactly one of mount, path, pid, cgroup", path="storage")
    target = activity.current().require_target()
    node = chosen.get("node")
    if node is not None and node not in target.agents:
        raise InvalidInput(f"no node {node!r} in target {target.kind} (nodes: "
                           f"{', '.join(sorted(target.agents))})", path="storage.node")
    if which[0] in ("pid", "cgroup"):
        if node is None and len(target.agents) != 1:
            raise InvalidInput("name the node", path="storage.node")
        return node or next(iter(target.agents)), {which[0]: chosen[which[0]]}
    wanted = chosen.get("mount") or chosen.get("path")
    candidates = [node] if node is not None else sorted(target.agents)
    for name in candidates:
        for mount in inventory_of(target.agent(name)).get("mounts", []):
            if wanted in (mount.get("name"), mount.get("path")):
                if not mount.get("faultable", True):
                    raise InvalidInput(f"mount {wanted!r} on {name} cannot be faulted now: "
                                       f"{mount.get('error', 'unknown reason')}",
                                       path="storage")
                key = "mount" if "mount" in chosen else "path"
                return name, {key: wanted}
    path = chosen.get("path")
    if isinstance(path, str) and path.startswith("/"):
        if node is None and len(target.agents) != 1:
            raise InvalidInput(f"name the node: {len(target.agents)} agents could layer "
                               f"{path}", path="storage.node")
        return node or next(iter(target.agents)), {"path": path}
    raise InvalidInput(f"no mount {wanted!r} on target {target.kind}"
                       + ("" if "mount" in chosen else " (a path must be absolute)"),
                       path="storage")


def _inject(kind: KindSpec[KindParams], action: str, selector: Any, params: dict[str, Any],
            lease_s: float | None) -> dict[str, Any]:
    with activity.failing():
        node, agent_target = resolve_storage(selector)
        entry = activity.inject_on_node(kind.name, node=node, target=agent_target,
                                        params=params, action=action, lease_s=lease_s)
    return activity.applied([entry])
