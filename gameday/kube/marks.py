"""Revert marks: what gameday changed on a Kubernetes object, and how to undo it, kept ON
the object so that it can be undone even when the orchestrator is gone.

A node that gameday cordoned or tainted carries two annotations::

    gameday.dev/revert-by: "1795969014.36"          # earliest deadline of its marks (epoch s)
    gameday.dev/revert: '[{"id": "k8s-…", "kind": "k8s.node_cordon", "run": "…",
                           "revert_by": 1795969014.36, "inverse": {"op": "uncordon"}}]'

The orchestrator renews ``revert_by`` while the run lives (like an agent lease) and
removes the mark when it reverts; an agent's reconciler (:mod:`gameday.agent.reconcile`)
undoes any mark whose ``revert_by`` has passed. Inverses: ``{"op": "uncordon"}`` and
``{"op": "untaint", "key", "value", "effect"}``.
"""

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

__all__ = ["MARKS_ANNOTATION", "REVERT_BY_ANNOTATION", "Mark", "annotations_for", "read_marks",
           "undo_patch"]

REVERT_BY_ANNOTATION = "gameday.dev/revert-by"
MARKS_ANNOTATION = "gameday.dev/revert"


@dataclass(frozen=True)
class Mark:
    """One change gameday made to an object, with its inverse and deadline."""

    id: str
    kind: str
    run: str
    revert_by: float
    inverse: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "kind": self.kind, "run": self.run,
                "revert_by": round(self.revert_by, 3), "inverse": dict(self.inverse)}

    def renewed(self, revert_by: float) -> "Mark":
        return replace(self, revert_by=revert_by)


def read_marks(annotations: Mapping[str, str] | None) -> list[Mark]:
    """The marks in an object's annotations (unreadable entries are skipped)."""
    raw = (annotations or {}).get(MARKS_ANNOTATION)
    if not raw:
        return []
    try:
        items = json.loads(raw)
    except ValueError:
        return []
    marks = []
    for item in items if isinstance(items, list) else []:
        try:
            marks.append(Mark(id=str(item["id"]), kind=str(item["kind"]),
                              run=str(item.get("run", "")),
                              revert_by=float(item["revert_by"]),
                              inverse=dict(item.get("inverse") or {})))
        except (KeyError, TypeError, ValueError):
            continue
    return marks


def annotations_for(marks: Sequence[Mark]) -> dict[str, str | None]:
    """The annotation values (for a merge patch) that hold exactly ``marks``; ``None``
    removes an annotation when no mark is left."""
    if not marks:
        return {REVERT_BY_ANNOTATION: None, MARKS_ANNOTATION: None}
    return {REVERT_BY_ANNOTATION: f"{min(m.revert_by for m in marks):.3f}",
            MARKS_ANNOTATION: json.dumps([m.to_json() for m in marks], sort_keys=True,
                                         separators=(",", ":"))}


def undo_patch(spec: Mapping[str, Any], undone: Sequence[Mark],
               remaining: Sequence[Mark]) -> dict[str, Any]:
    """The ``spec`` part of a merge patch that applies the inverses of ``undone``.

    ``spec`` is the node's current spec (wire names: ``unschedulable``, ``taints``). A
    cordon is lifted only when no remaining mark still needs it.
    """
    patch: dict[str, Any] = {}
    ops = [m.inverse.get("op") for m in undone]
    still_cordoned = any(m.inverse.get("op") == "uncordon" for m in remaining)
    if "uncordon" in ops and not still_cordoned and spec.get("unschedulable"):
        patch["unschedulable"] = None
    removals = [m.inverse for m in undone if m.inverse.get("op") == "untaint"]
    if removals:
        taints = list(spec.get("taints") or [])
        kept = [t for t in taints if not any(
            t.get("key") == r.get("key") and t.get("effect") == r.get("effect")
            and (t.get("value") or "") == (r.get("value") or "") for r in removals)]
        if len(kept) != len(taints):
            patch["taints"] = kept or None
    return patch
