"""The units a controller owns (replicas, pods, processes) as the controller's own API
reports them, read through a JMESPath mapping, so any controller's JSON is a source.

A :class:`UnitMapping` names, in JMESPath (https://jmespath.org):

- ``units``: where the list of units is in the document;
- ``id``: each unit's identity (a new process, pod or replica has a new one);
- ``state`` (optional): its state in the controller's words;
- ``ready``: an expression true for a healthy unit, or ``ready_states``, the states
  that are;
- ``since`` (optional): when the unit entered its current state, by the controller's
  clock (Unix seconds, or RFC 3339 / ISO 8601), so transitions are timed by the
  controller itself rather than by when gameday looked.

Ready mappings (:data:`MAPPINGS`): ``ray_serve`` (``GET /api/serve/applications/``:
every replica of every deployment of every application), ``kubernetes`` (a PodList:
a Deployment's or ReplicaSet's pods by their label selector; a terminating pod is not
ready) and ``kserve`` (an InferenceService's pods, the ``kubernetes`` mapping: its
status names revisions and conditions, not the pods a fault replaces).

A document the mapping does not fit is an error naming the expression and what it met
(:class:`UnitsError`), never an empty list of units.
"""

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

import jmespath
from jmespath.exceptions import JMESPathError

from gameday.activity import one_line
from gameday.errors import GamedayError
from gameday.httpclient import get_json

__all__ = ["MAPPINGS", "HttpUnitSource", "KubernetesUnitSource", "Unit", "UnitMapping",
           "UnitSnapshot", "UnitSource", "UnitsError", "unit_source"]


class UnitsError(GamedayError):
    """A unit source could not be read, or its document does not fit its mapping."""


@dataclass(frozen=True)
class Unit:
    """One unit: its identity, its state, whether it is healthy, and since when (by the
    controller's clock; None when the controller does not say)."""

    id: str
    state: str
    ready: bool
    since: float | None = None


@dataclass(frozen=True)
class UnitSnapshot:
    """The units as read: the answer arrived at ``t`` (gameday's clock), the request was
    sent at ``sent`` (``t`` when not given); the controller made the document between."""

    t: float
    units: tuple[Unit, ...]
    sent: float | None = None

    @property
    def requested(self) -> float:
        """When the reading was asked for: before the controller made its document."""
        return self.t if self.sent is None else self.sent

    def by_id(self) -> dict[str, Unit]:
        return {unit.id: unit for unit in self.units}


class UnitSource(Protocol):
    """Where the units are read: ``describe`` names it, ``read`` gives the units."""

    def describe(self) -> str: ...

    def read(self) -> tuple[Unit, ...]: ...


def _compile(expression: Any, key: str) -> Any:
    if not isinstance(expression, str) or not expression:
        raise UnitsError(f"mapping.{key} must be a JMESPath expression, got {expression!r}")
    try:
        return jmespath.compile(expression)
    except JMESPathError as exc:
        raise UnitsError(f"mapping.{key} {expression!r}: "
                         f"{one_line(str(exc), 160)}") from None


def _search(expression: str, key: str, document: Any, where: str) -> Any:
    """``expression`` (``mapping.KEY``) on ``document``; an error that names both when
    the document's types do not fit it (e.g. ``values()`` of a missing object)."""
    try:
        return _compile(expression, key).search(document)
    except JMESPathError as exc:
        raise UnitsError(f"{where}: mapping.{key} {expression!r} does not fit "
                         f"{_keys(document)}: {one_line(str(exc), 120)}") from None


def _instant(value: Any, where: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        except ValueError:
            pass
    raise UnitsError(f"{where} must be Unix seconds or an RFC 3339 time, got {value!r}")


def _keys(document: Any) -> str:
    if isinstance(document, Mapping):
        return "an object with keys " + (", ".join(sorted(map(str, document))[:8]) or "none")
    return f"a JSON {type(document).__name__}"


@dataclass(frozen=True)
class UnitMapping:
    """A controller's JSON document read as units (see the module's docstring)."""

    units: str
    id: str
    state: str | None = None
    ready: str | None = None
    ready_states: tuple[str, ...] = ()
    since: str | None = None

    def __post_init__(self) -> None:
        if (self.ready is None) == (not self.ready_states):
            raise UnitsError("mapping needs exactly one of ready (JMESPath) and "
                             "ready_states (a list of states)")
        for key in ("units", "id", "state", "ready", "since"):
            if key in ("units", "id") or getattr(self, key) is not None:
                _compile(getattr(self, key), key)
        if self.ready_states and self.state is None:
            raise UnitsError("mapping.ready_states needs mapping.state")

    @classmethod
    def from_spec(cls, spec: Any) -> "UnitMapping":
        """A ready mapping by name, or ``{units, id, state?, ready? | ready_states?,
        since?}``; a one-line error naming the key otherwise."""
        if isinstance(spec, str):
            if spec not in MAPPINGS:
                raise UnitsError(f"mapping {spec!r} is not a ready mapping (known: "
                                 f"{', '.join(sorted(MAPPINGS))}); or give {{units, id, "
                                 f"ready | ready_states, state?, since?}}")
            return MAPPINGS[spec]
        if not isinstance(spec, Mapping):
            raise UnitsError(f"mapping must be a name or a mapping, got {spec!r}")
        known = ("units", "id", "state", "ready", "ready_states", "since")
        unknown = sorted(set(map(str, spec)) - set(known))
        if unknown:
            raise UnitsError(f"mapping has unknown key {unknown[0]!r} (known: "
                             f"{', '.join(known)})")
        for key in ("units", "id"):
            if key not in spec:
                raise UnitsError(f"mapping needs {key} (JMESPath)")
        states = spec.get("ready_states") or ()
        if not isinstance(states, list | tuple) or not all(isinstance(s, str) for s in states):
            raise UnitsError(f"mapping.ready_states must be a list of states, got {states!r}")
        return cls(units=spec["units"], id=spec["id"], state=spec.get("state"),
                   ready=spec.get("ready"), ready_states=tuple(states),
                   since=spec.get("since"))

    def apply(self, document: Any, where: str) -> tuple[Unit, ...]:
        """The units of ``document`` (read from ``where``)."""
        found = _search(self.units, "units", document, where)
        if found is None:
            raise UnitsError(f"{where}: mapping.units {self.units!r} matched nothing in "
                             f"{_keys(document)}")
        if not isinstance(found, list):
            raise UnitsError(f"{where}: mapping.units {self.units!r} gave a JSON "
                             f"{type(found).__name__}, not a list")
        units = []
        for index, raw in enumerate(found):
            here = f"{where}: units[{index}]"
            identity = _search(self.id, "id", raw, here)
            if identity is None or isinstance(identity, dict | list | bool):
                raise UnitsError(f"{here}: mapping.id {self.id!r} gave {identity!r} in "
                                 f"{_keys(raw)}")
            state = "" if self.state is None else _search(self.state, "state", raw, here)
            if state is None:
                raise UnitsError(f"{here}: mapping.state {self.state!r} matched nothing "
                                 f"in {_keys(raw)}")
            if self.ready is not None:
                ready = _search(self.ready, "ready", raw, here)
                if not isinstance(ready, bool):
                    raise UnitsError(f"{here}: mapping.ready {self.ready!r} gave "
                                     f"{ready!r}, not true or false")
            else:
                ready = str(state) in self.ready_states
            since = None if self.since is None else _instant(
                _search(self.since, "since", raw, here), f"{here}.since ({self.since!r})")
            units.append(Unit(str(identity), str(state), ready, since))
        return tuple(units)


_K8S_READY = "!!(status.conditions[?type=='Ready' && status=='True'])"
#: The ready mappings by name.
MAPPINGS: dict[str, UnitMapping] = {
    "ray_serve": UnitMapping(
        units="values(applications)[].values(deployments)[].replicas[]",
        id="replica_id", state="state", ready_states=("RUNNING",)),
    "kubernetes": UnitMapping(
        units="items", id="metadata.name",
        state="(metadata.deletionTimestamp) && 'Terminating' || status.phase || 'Unknown'",
        ready=f"!(metadata.deletionTimestamp) && {_K8S_READY}",
        since="status.conditions[?type=='Ready'].lastTransitionTime | [0]"),
}
MAPPINGS["kserve"] = MAPPINGS["kubernetes"]
KSERVE_LABEL = "serving.kserve.io/inferenceservice"


class HttpUnitSource:
    """A controller's HTTP JSON API read through a mapping."""

    def __init__(self, url: str, mapping: UnitMapping, timeout_s: float = 5.0,
                 headers: Mapping[str, str] | None = None) -> None:
        self.url, self.mapping, self.timeout_s = url, mapping, timeout_s
        self.headers = dict(headers or {})

    def describe(self) -> str:
        return self.url

    def read(self) -> tuple[Unit, ...]:
        try:
            document = get_json(self.url, timeout_s=self.timeout_s, headers=self.headers)
        except GamedayError as exc:
            raise UnitsError(str(exc)) from None
        return self.mapping.apply(document, self.url)


class KubernetesUnitSource:
    """The pods of a namespace that match a label selector, as the API serves them (its
    raw PodList JSON), read through a mapping (``kubernetes`` by default)."""

    def __init__(self, core: Any, namespace: str, selector: str, mapping: UnitMapping,
                 where: str) -> None:
        self.core, self.namespace, self.selector = core, namespace, selector
        self.mapping, self.where = mapping, where

    def describe(self) -> str:
        return f"pods {self.selector} in {self.namespace} at {self.where}"

    def read(self) -> tuple[Unit, ...]:
        from kubernetes.client.exceptions import ApiException

        try:
            answer = self.core.list_namespaced_pod(self.namespace,
                                                   label_selector=self.selector,
                                                   _preload_content=False)
            document = json.loads(answer.data)
        except ApiException as exc:
            raise UnitsError(f"kubernetes API at {self.where}: {exc.status} "
                             f"{one_line(str(exc.reason), 120)}") from None
        except Exception as exc:  # urllib3 and socket errors of the client, bad JSON
            raise UnitsError(f"kubernetes API at {self.where}: {type(exc).__name__}: "
                             f"{one_line(str(exc), 160)}") from None
        return self.mapping.apply(document, self.describe())


_K8S_KEYS = ("namespace", "selector", "k8s_api_url", "k8s_api_token", "kubeconfig",
             "k8s_context")


def _kubernetes(spec: Mapping[str, Any], mapping: UnitMapping, what: str) -> UnitSource:
    unknown = sorted(set(map(str, spec)) - set(_K8S_KEYS) - ({"name"} if what == "kserve"
                                                             else set()))
    if unknown:
        raise UnitsError(f"units.{what} has unknown key {unknown[0]!r}")
    if what == "kserve":
        if not spec.get("name"):
            raise UnitsError("units.kserve needs name (the InferenceService)")
        selector = f"{KSERVE_LABEL}={spec['name']}"
    else:
        selector = str(spec.get("selector") or "")
        if not selector:
            raise UnitsError("units.kubernetes needs selector (the Deployment's or "
                             "ReplicaSet's label selector, e.g. app=web)")
    from kubernetes import client

    from gameday.kube.config import api_client, settings_from

    settings = settings_from({key: spec[key] for key in
                              ("k8s_api_url", "k8s_api_token", "kubeconfig", "k8s_context")
                              if spec.get(key)})
    core = client.CoreV1Api(api_client(settings))
    return KubernetesUnitSource(core, str(spec.get("namespace") or "default"), selector,
                                mapping, settings.api_url or settings.kubeconfig or
                                "in-cluster")


def unit_source(spec: Any, timeout_s: float = 5.0) -> UnitSource:
    """A source from a verifier's ``units`` argument: ``{"url": URL, "mapping": NAME |
    {...}, "headers"?: {NAME: VALUE}}``, ``{"kubernetes": {namespace, selector,
    k8s_api_url?, ...}, "mapping"?}`` or ``{"kserve": {namespace, name, ...}}``."""
    if not isinstance(spec, Mapping):
        raise UnitsError(f"units must be a mapping ({{url, mapping}}, {{kubernetes: ...}} "
                         f"or {{kserve: ...}}), got {spec!r}")
    kinds = [kind for kind in ("url", "kubernetes", "kserve") if kind in spec]
    unknown = sorted(set(map(str, spec)) - {"url", "kubernetes", "kserve", "mapping",
                                            "headers"})
    if len(kinds) != 1 or unknown:
        raise UnitsError("units needs exactly one of url, kubernetes and kserve"
                         + (f" (unknown key {unknown[0]!r})" if unknown else ""))
    kind = kinds[0]
    if "headers" in spec and kind != "url":
        raise UnitsError(f"units.headers goes with a url; units.{kind} authenticates "
                         f"with k8s_api_token or kubeconfig")
    if kind == "url":
        if "mapping" not in spec:
            raise UnitsError(f"units.mapping is needed with a url (a ready mapping: "
                             f"{', '.join(sorted(MAPPINGS))}, or {{units, id, ...}})")
        url = str(spec["url"])
        if not url.startswith(("http://", "https://")):
            raise UnitsError(f"units.url must be an http(s) URL, got {url!r}")
        headers = spec.get("headers") or {}
        if not isinstance(headers, Mapping) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in headers.items()):
            # (the values are not echoed: a header may carry a token)
            raise UnitsError("units.headers must map header names to strings")
        return HttpUnitSource(url, UnitMapping.from_spec(spec["mapping"]), timeout_s,
                              headers)
    settings = spec[kind]
    if not isinstance(settings, Mapping):
        raise UnitsError(f"units.{kind} must be a mapping, got {settings!r}")
    return _kubernetes(settings, UnitMapping.from_spec(spec.get("mapping", kind)), kind)
