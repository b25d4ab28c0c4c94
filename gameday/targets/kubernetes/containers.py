"""A container of a pod, picked by the pod's labels (or name) and the container's name.

A process fault on ``--target kubernetes`` can select ``process: {pod: {...}}``:

=================  ==================================================================
key                meaning
=================  ==================================================================
``namespace``      the pod's namespace (required; ``allow.namespaces`` applies)
``labels``         a mapping ``{KEY: VALUE}`` the pod must carry, e.g.
                   ``{job-name: llama-ft, rank: "1"}``
``label_selector`` the same as a selector string, e.g. ``job-name=llama-ft,rank=1``
``name``           the pod by name (instead of labels)
``container``      the container's name; optional when the pod has one container
=================  ==================================================================

Exactly one Running pod must match; the container must be running. The pod's
``status.containerStatuses[].containerID`` (``containerd://ID``, ``cri-o://ID``,
``docker://ID``) names the container's cgroup on its node: every runtime puts the ID
in the cgroup path (``.../pod<UID>/ID``, ``...-cri-containerd-ID.scope``, ``crio-ID.scope``),
so the node's agent selects the container's processes with ``cgroup: ID``. Only the
API is read here; nothing is changed.
"""

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gameday.errors import InvalidInput, TargetUnavailable
from gameday.kinds.process import POD_SELECTOR

__all__ = ["POD_KEYS", "ContainerRef", "find_container", "pod_selector_text"]

POD_KEYS = POD_SELECTOR.key_names

_RUNTIME_ID = re.compile(r"^(?P<runtime>[a-z0-9.+-]+)://(?P<id>[A-Za-z0-9._-]+)$")


@dataclass(frozen=True)
class ContainerRef:
    """A running container: where it is and the ID its cgroup path carries."""

    namespace: str
    pod: str
    container: str
    node: str
    runtime: str
    container_id: str

    def pod_label(self) -> str:
        return f"{self.namespace}/{self.pod}"

    def cgroup_pattern(self) -> str:
        """The RE2 pattern the agent searches in ``/proc/PID/cgroup``."""
        return re.escape(self.container_id)


def pod_selector_text(selector: Mapping[str, Any]) -> str | None:
    """``labels`` or ``label_selector`` as one selector string (None when neither)."""
    if "labels" in selector:
        return ",".join(f"{k}={v}" for k, v in sorted(selector["labels"].items()))
    value = selector.get("label_selector")
    return str(value) if value is not None else None


def _checked(selector: Any, where: str) -> dict[str, Any]:
    if not isinstance(selector, Mapping):
        raise InvalidInput(f"must be a mapping ({', '.join(POD_KEYS)}), got {selector!r}",
                           path=where)
    unknown = sorted(set(selector) - set(POD_KEYS))
    if unknown:
        raise InvalidInput(f"unknown key (known: {', '.join(POD_KEYS)})",
                           path=f"{where}.{unknown[0]}")
    chosen = dict(selector)
    for key in ("namespace", "label_selector", "name", "container"):
        if key in chosen and (not isinstance(chosen[key], str) or not chosen[key]):
            raise InvalidInput(f"must be a non-empty string, got {chosen[key]!r}",
                               path=f"{where}.{key}")
    if not chosen.get("namespace"):
        raise InvalidInput("needs the pod's namespace", path=f"{where}.namespace")
    labels = chosen.get("labels")
    if "labels" in chosen and (not isinstance(labels, Mapping) or not labels or not all(
            isinstance(v, str | int) and not isinstance(v, bool) for v in labels.values())):
        raise InvalidInput("must be a non-empty mapping KEY: VALUE", path=f"{where}.labels")
    picks = [key for key in ("labels", "label_selector", "name") if key in chosen]
    if len(picks) != 1:
        raise InvalidInput("give exactly one of labels, label_selector, name", path=where)
    return chosen


def _listed(core: Any, chosen: Mapping[str, Any]) -> list[Any]:
    from kubernetes.client.exceptions import ApiException

    namespace = chosen["namespace"]
    try:
        if "name" in chosen:
            return [core.read_namespaced_pod(chosen["name"], namespace)]
        return list(core.list_namespaced_pod(
            namespace, label_selector=pod_selector_text(chosen)).items)
    except ApiException as exc:
        if exc.status == 404:
            return []
        raise TargetUnavailable(f"kubernetes API: pods in {namespace}: {exc.status} "
                                f"{exc.reason}") from None


def _running(pod: Any) -> bool:
    return (pod.status is not None and pod.status.phase == "Running"
            and pod.metadata.deletion_timestamp is None)


def _container_of(pod: Any, wanted: str | None, where: str) -> tuple[str, Any]:
    label = f"{pod.metadata.namespace}/{pod.metadata.name}"
    names = [c.name for c in pod.spec.containers or []]
    if wanted is None:
        if len(names) != 1:
            raise InvalidInput(f"pod {label} has {len(names)} containers "
                               f"({', '.join(names)}); say which", path=f"{where}.container")
        wanted = names[0]
    elif wanted not in names:
        raise InvalidInput(f"pod {label} has no container {wanted!r} (containers: "
                           f"{', '.join(names) or 'none'})", path=f"{where}.container")
    statuses = {s.name: s for s in (pod.status.container_statuses or [])}
    return wanted, statuses.get(wanted)


def _why_not_running(status: Any) -> str:
    state = getattr(status, "state", None)
    for phase in ("waiting", "terminated"):
        detail = getattr(state, phase, None) if state is not None else None
        if detail is not None:
            return f"{phase}: {getattr(detail, 'reason', None) or 'no reason given'}"
    return "no status yet"


def find_container(core: Any, selector: Any, *, where: str = "process.pod") -> ContainerRef:
    """The one running container ``selector`` names (see the module's table); a one-line
    :class:`InvalidInput` naming ``where`` otherwise."""
    chosen = _checked(selector, where)
    namespace = chosen["namespace"]
    pods = sorted((p for p in _listed(core, chosen) if _running(p)),
                  key=lambda p: p.metadata.name)
    described = chosen.get("name") or pod_selector_text(chosen)
    if not pods:
        raise InvalidInput(f"no Running pod in namespace {namespace} matches {described!r}",
                           path=where)
    if len(pods) > 1:
        shown = ", ".join(p.metadata.name for p in pods[:5])
        raise InvalidInput(f"{len(pods)} Running pods in namespace {namespace} match "
                           f"{described!r} ({shown}{', ...' if len(pods) > 5 else ''}); "
                           "narrow the labels so that one does", path=where)
    pod = pods[0]
    name, status = _container_of(pod, chosen.get("container"), where)
    label = f"{namespace}/{pod.metadata.name}"
    running = status is not None and getattr(status.state, "running", None) is not None
    if not running:
        reason = _why_not_running(status) if status is not None else "no status yet"
        raise InvalidInput(f"container {name} of pod {label} is not running ({reason})",
                           path=where)
    parsed = _RUNTIME_ID.match(str(status.container_id or ""))
    if parsed is None:
        raise InvalidInput(f"container {name} of pod {label} has no container ID the node "
                           f"can find ({status.container_id!r})", path=where)
    return ContainerRef(namespace=namespace, pod=str(pod.metadata.name), container=name,
                        node=str(pod.spec.node_name or ""), runtime=parsed["runtime"],
                        container_id=parsed["id"])
