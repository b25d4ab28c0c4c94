"""A local Kubernetes API **stand-in** over real HTTP, for tests of
``gameday.targets.kubernetes`` and of your own experiments against a "cluster".

It is not a Kubernetes API server: where no cluster exists, it is a small HTTP server
(stdlib ``ThreadingHTTPServer``) that speaks the parts of the core/v1 wire protocol
gameday uses, driven by the REAL ``kubernetes`` Python client pointed at it:

- lists a page at a time (``limit`` and ``continue``, in key order; the pages are not
  one snapshot);
- nodes: list (``labelSelector``, ``fieldSelector=metadata.name=``), read, patch
  (``application/merge-patch+json`` and ``application/strategic-merge-patch+json``;
  the fields gameday patches, annotations, ``spec.unschedulable`` and ``spec.taints``,
  have no patch strategy, so both mean RFC 7386 here; a ``metadata.resourceVersion``
  in the patch is a precondition: a stale one answers ``409 Conflict``, as the real
  API server does);
- pods (with their containers' states and IDs): list per namespace or across namespaces
  (``labelSelector``, ``fieldSelector=spec.nodeName=``), read, delete, and the eviction
  subresource, which
  answers ``429 TooManyRequests`` while a PodDisruptionBudget-like rule allows no more
  disruptions (rules are set by the test with :meth:`KubeStandin.add_pdb`);
- secrets: read;
- configmaps: read, create (``409 AlreadyExists``), replace (``PUT``; a stale
  ``metadata.resourceVersion`` answers ``409``), delete (the fleet's safety lever);
- bearer-token authentication (``401`` without the token).

What is NOT emulated: watches (gameday reads what it watches every few seconds), the
scheduler, controllers (an evicted pod is simply gone), admission, field validation of
patches, JSON patch (``415``). Each test says which parts of what it checks rest on this
stand-in.
"""

import base64
import bisect
import json
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit


@dataclass
class Pdb:
    """A PodDisruptionBudget stand-in: pods in ``namespace`` matching ``match_labels``
    may be evicted while ``disruptions_allowed`` > 0 (each eviction uses one)."""

    namespace: str
    match_labels: dict[str, str]
    disruptions_allowed: int


def _merge(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = _merge(result.get(key), value)
    return result


def _matches_labels(labels: dict[str, str], selector: str) -> bool:
    for term in filter(None, (t.strip() for t in selector.split(","))):
        if "!=" in term:
            key, value = term.split("!=", 1)
            if labels.get(key) == value:
                return False
        elif "=" in term:
            key, value = term.replace("==", "=").split("=", 1)
            if labels.get(key) != value:
                return False
        elif labels.get(term) is None:
            return False
    return True


def _field(obj: dict[str, Any], path: str) -> Any:
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def _matches_fields(obj: dict[str, Any], selector: str) -> bool:
    for term in filter(None, (t.strip() for t in selector.split(","))):
        key, _, value = term.replace("==", "=").partition("=")
        if str(_field(obj, key) or "") != value:
            return False
    return True


class KubeStandin:
    """The stand-in's state and server. ``start()`` serves on 127.0.0.1 (a free port)."""

    def __init__(self, token: str = "standin-token") -> None:
        self.token = token
        self.nodes: dict[str, dict[str, Any]] = {}
        self.pods: dict[tuple[str, str], dict[str, Any]] = {}
        self.secrets: dict[tuple[str, str], dict[str, Any]] = {}
        self.configmaps: dict[tuple[str, str], dict[str, Any]] = {}
        self.pdbs: list[Pdb] = []
        self.requests: list[tuple[str, str, str]] = []  # (method, path, content-type)
        self.lock = threading.RLock()
        # set hold_patches to answer every PATCH late: applied, then ``patched`` is set and
        # the answer waits until hold_patches is (the caller can die meanwhile)
        self.hold_patches: threading.Event | None = None
        self.patched = threading.Event()
        self._rv = 100
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _make_handler(self))
        self._httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        self._thread: threading.Thread | None = None

    # -- lifecycle -----------------------------------------------------------------
    def start(self) -> "KubeStandin":
        self._thread = threading.Thread(target=self._httpd.serve_forever,
                                        kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    # -- fixtures ------------------------------------------------------------------
    def next_rv(self) -> str:
        self._rv += 1
        return str(self._rv)

    def add_node(self, name: str, labels: dict[str, str] | None = None,
                 address: str = "127.0.0.1") -> dict[str, Any]:
        with self.lock:
            node = {
                "apiVersion": "v1", "kind": "Node",
                "metadata": {"name": name, "labels": dict(labels or {}), "annotations": {},
                             "resourceVersion": self.next_rv(), "uid": f"uid-node-{name}"},
                "spec": {},
                "status": {"addresses": [{"type": "InternalIP", "address": address}]},
            }
            self.nodes[name] = node
            return node

    def add_pod(self, namespace: str, name: str, node: str, *,
                labels: dict[str, str] | None = None, pod_ip: str = "127.0.0.1",
                port: int | None = None, owner_kind: str = "ReplicaSet",
                ready: bool = True,
                containers: dict[str, str | None] | None = None) -> dict[str, Any]:
        """A Running pod. ``containers`` maps each container's name to its status's
        ``containerID`` (``containerd://ID``: running; ``None``: still waiting, as in
        ``ContainerCreating``); default one container ``main`` without a status."""
        specs: list[dict[str, Any]] = [{"name": container, "image": "example/app:1"}
                                       for container in (containers or {"main": None})]
        if port is not None:
            specs[0]["ports"] = [{"name": "agent", "containerPort": port}]
        statuses = [_container_status(container, cid)
                    for container, cid in (containers or {}).items()]
        with self.lock:
            pod: dict[str, Any] = {
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": namespace, "labels": dict(labels or {}),
                             "resourceVersion": self.next_rv(), "uid": f"uid-pod-{name}",
                             "ownerReferences": [{"apiVersion": "apps/v1", "kind": owner_kind,
                                                  "name": f"{name}-owner", "uid": "o-1",
                                                  "controller": True}]},
                "spec": {"nodeName": node, "containers": specs},
                "status": {"phase": "Running", "podIP": pod_ip,
                           "conditions": [{"type": "Ready",
                                           "status": "True" if ready else "False"}]},
            }
            if statuses:
                pod["status"]["containerStatuses"] = statuses
            self.pods[(namespace, name)] = pod
            return pod

    def add_secret(self, namespace: str, name: str, data: dict[str, str]) -> None:
        with self.lock:
            self.secrets[(namespace, name)] = {
                "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                "metadata": {"name": name, "namespace": namespace,
                             "resourceVersion": self.next_rv()},
                "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()},
            }

    def add_pdb(self, namespace: str, match_labels: dict[str, str], allowed: int) -> Pdb:
        pdb = Pdb(namespace, dict(match_labels), allowed)
        with self.lock:
            self.pdbs.append(pdb)
        return pdb

    def patch_node_directly(self, name: str, patch: dict[str, Any]) -> None:
        """What another actor (a person, a controller) does to a node."""
        with self.lock:
            node = _merge(self.nodes[name], patch)
            node["metadata"]["resourceVersion"] = self.next_rv()
            self.nodes[name] = node


def _container_status(name: str, container_id: str | None) -> dict[str, Any]:
    status: dict[str, Any] = {"name": name, "image": "example/app:1", "imageID": "",
                              "restartCount": 0, "ready": container_id is not None}
    if container_id is None:
        status["state"] = {"waiting": {"reason": "ContainerCreating"}}
    else:
        status["containerID"] = container_id
        status["state"] = {"running": {"startedAt": "2026-01-01T00:00:00Z"}}
    return status


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {},
            "status": "Success" if code < 300 else "Failure",
            "message": message, "reason": reason, "code": code}


class _Failure(Exception):
    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message


_NODE = re.compile(r"^/api/v1/nodes/([^/]+)$")
_PODS_NS = re.compile(r"^/api/v1/namespaces/([^/]+)/pods$")
_POD = re.compile(r"^/api/v1/namespaces/([^/]+)/pods/([^/]+)$")
_EVICT = re.compile(r"^/api/v1/namespaces/([^/]+)/pods/([^/]+)/eviction$")
_SECRET = re.compile(r"^/api/v1/namespaces/([^/]+)/secrets/([^/]+)$")
_CONFIGMAPS = re.compile(r"^/api/v1/namespaces/([^/]+)/configmaps$")
_CONFIGMAP = re.compile(r"^/api/v1/namespaces/([^/]+)/configmaps/([^/]+)$")


def _make_handler(api: KubeStandin) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            return

        def _send(self, code: int, payload: Any) -> None:
            body = json.dumps(payload).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _handle(self, method: str) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            parts = urlsplit(self.path)
            query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
            content_type = (self.headers.get("Content-Type") or "").split(";")[0]
            with api.lock:
                api.requests.append((method, parts.path, content_type))
            if self.headers.get("Authorization") != f"Bearer {api.token}":
                self._send(401, _status(401, "Unauthorized", "Unauthorized"))
                return
            try:
                body = json.loads(raw) if raw else None
                code, payload = _route(api, method, parts.path, query, body, content_type)
            except _Failure as failure:
                code, payload = failure.code, _status(failure.code, failure.reason,
                                                      failure.message)
            if method == "PATCH" and api.hold_patches is not None:
                api.patched.set()
                api.hold_patches.wait(60)
            self._send(code, payload)

        def do_GET(self) -> None:
            self._handle("GET")

        def do_PATCH(self) -> None:
            self._handle("PATCH")

        def do_POST(self) -> None:
            self._handle("POST")

        def do_DELETE(self) -> None:
            self._handle("DELETE")

        def do_PUT(self) -> None:
            self._handle("PUT")

    return Handler


def _list(kind: str, objects: list[dict[str, Any]], query: dict[str, str], rv: str
          ) -> dict[str, Any]:
    """A list answer of the ``objects`` the query's selectors match, in key order
    (namespace, name), a page at a time when the query has a ``limit``: the rest is
    asked for with ``continue`` (the token of the last page's metadata; a malformed one
    answers ``400``, as the API server does). Unlike the API server's, the pages are not
    one snapshot: an object added or removed between pages shows as of the page read."""
    matched = sorted((o for o in objects if _matches(o, query)), key=_key)
    meta: dict[str, Any] = {"resourceVersion": rv}
    if token := query.get("continue"):
        try:
            start = tuple(json.loads(base64.urlsafe_b64decode(token))["start"])
        except (ValueError, KeyError, TypeError):
            start = ()
        if len(start) != 2 or not all(isinstance(part, str) for part in start):
            raise _Failure(400, "BadRequest", "continue key is not valid")
        matched = matched[bisect.bisect_right(matched, start, key=_key):]
    limit = query.get("limit", "")
    if limit.isdigit() and 0 < int(limit) < len(matched):
        meta["remainingItemCount"] = len(matched) - int(limit)
        matched = matched[:int(limit)]
        meta["continue"] = base64.urlsafe_b64encode(json.dumps(
            {"rv": rv, "start": list(_key(matched[-1]))}).encode()).decode()
    return {"apiVersion": "v1", "kind": kind, "metadata": meta,
            "items": [json.loads(json.dumps(o)) for o in matched]}


def _key(obj: dict[str, Any]) -> tuple[str, str]:
    return obj["metadata"].get("namespace") or "", obj["metadata"]["name"]


def _matches(obj: dict[str, Any], query: dict[str, str]) -> bool:
    return (_matches_labels(obj["metadata"].get("labels") or {}, query.get("labelSelector", ""))
            and _matches_fields(obj, query.get("fieldSelector", "")))


def _route(api: KubeStandin, method: str, path: str, query: dict[str, str], body: Any,
           content_type: str) -> tuple[int, Any]:
    with api.lock:
        rv = str(api._rv)
        if method == "GET" and path == "/api/v1/nodes":
            return 200, _list("NodeList", list(api.nodes.values()), query, rv)
        if method == "GET" and path == "/api/v1/pods":
            return 200, _list("PodList", list(api.pods.values()), query, rv)
        if (m := _PODS_NS.match(path)) and method == "GET":
            pods = [p for (ns, _), p in api.pods.items() if ns == m.group(1)]
            return 200, _list("PodList", pods, query, rv)
        if m := _NODE.match(path):
            return _node(api, method, m.group(1), body, content_type)
        if m := _EVICT.match(path):
            if method != "POST":
                raise _Failure(405, "MethodNotAllowed", "method not allowed")
            return _evict(api, m.group(1), m.group(2))
        if m := _POD.match(path):
            pod = api.pods.get((m.group(1), m.group(2)))
            if pod is None:
                raise _Failure(404, "NotFound", f'pods "{m.group(2)}" not found')
            if method == "GET":
                return 200, pod
            if method == "DELETE":
                del api.pods[(m.group(1), m.group(2))]
                return 200, pod
        if (m := _SECRET.match(path)) and method == "GET":
            secret = api.secrets.get((m.group(1), m.group(2)))
            if secret is None:
                raise _Failure(404, "NotFound", f'secrets "{m.group(2)}" not found')
            return 200, secret
        if (m := _CONFIGMAPS.match(path)) and method == "POST":
            return _create_configmap(api, m.group(1), body)
        if m := _CONFIGMAP.match(path):
            return _configmap(api, method, m.group(1), m.group(2), body)
    raise _Failure(404, "NotFound", f"the stand-in does not serve {method} {path}")


def _create_configmap(api: KubeStandin, namespace: str, body: Any) -> tuple[int, Any]:
    name = str(((body or {}).get("metadata") or {}).get("name") or "")
    if not name:
        raise _Failure(422, "Invalid", "metadata.name is required")
    if (namespace, name) in api.configmaps:
        raise _Failure(409, "AlreadyExists", f'configmaps "{name}" already exists')
    stored = json.loads(json.dumps(body))
    stored.update(apiVersion="v1", kind="ConfigMap")
    stored["metadata"].update(namespace=namespace, resourceVersion=api.next_rv())
    api.configmaps[(namespace, name)] = stored
    return 201, stored


def _configmap(api: KubeStandin, method: str, namespace: str, name: str,
               body: Any) -> tuple[int, Any]:
    current = api.configmaps.get((namespace, name))
    if current is None:
        raise _Failure(404, "NotFound", f'configmaps "{name}" not found')
    if method == "GET":
        return 200, current
    if method == "DELETE":
        del api.configmaps[(namespace, name)]
        return 200, _status(200, "", "")
    if method != "PUT" or not isinstance(body, dict):
        raise _Failure(405, "MethodNotAllowed", "method not allowed")
    wanted_rv = (body.get("metadata") or {}).get("resourceVersion")
    if wanted_rv is not None and wanted_rv != current["metadata"]["resourceVersion"]:
        raise _Failure(409, "Conflict", f'Operation cannot be fulfilled on configmaps "{name}"')
    stored = json.loads(json.dumps(body))
    stored.update(apiVersion="v1", kind="ConfigMap")
    stored.setdefault("metadata", {}).update(name=name, namespace=namespace,
                                             resourceVersion=api.next_rv())
    api.configmaps[(namespace, name)] = stored
    return 200, stored


def _node(api: KubeStandin, method: str, name: str, body: Any,
          content_type: str) -> tuple[int, Any]:
    node = api.nodes.get(name)
    if node is None:
        raise _Failure(404, "NotFound", f'nodes "{name}" not found')
    if method == "GET":
        return 200, node
    if method != "PATCH":
        raise _Failure(405, "MethodNotAllowed", "method not allowed")
    if content_type not in ("application/merge-patch+json",
                            "application/strategic-merge-patch+json"):
        raise _Failure(415, "UnsupportedMediaType",
                       f"the stand-in does not apply {content_type or 'no content type'}")
    if not isinstance(body, dict):
        raise _Failure(400, "BadRequest", "a merge patch must be a JSON object")
    wanted_rv = (body.get("metadata") or {}).get("resourceVersion")
    if wanted_rv is not None and wanted_rv != node["metadata"]["resourceVersion"]:
        raise _Failure(409, "Conflict",
                       f'Operation cannot be fulfilled on nodes "{name}": the object has '
                       "been modified; please apply your changes to the latest version "
                       "and try again")
    patched = _merge(node, body)
    patched["metadata"]["resourceVersion"] = api.next_rv()
    api.nodes[name] = patched
    return 200, patched


def _evict(api: KubeStandin, namespace: str, name: str) -> tuple[int, Any]:
    pod = api.pods.get((namespace, name))
    if pod is None:
        raise _Failure(404, "NotFound", f'pods "{name}" not found')
    labels = pod["metadata"].get("labels") or {}
    covering = [p for p in api.pdbs if p.namespace == namespace
                and all(labels.get(k) == v for k, v in p.match_labels.items())]
    if any(p.disruptions_allowed <= 0 for p in covering):
        raise _Failure(429, "TooManyRequests",
                       "Cannot evict pod as it would violate the pod's disruption budget.")
    for pdb in covering:
        pdb.disruptions_allowed -= 1
    del api.pods[(namespace, name)]
    return 201, _status(201, "", "")


@contextmanager
def running_standin(token: str = "standin-token") -> Iterator[KubeStandin]:
    """A started :class:`KubeStandin` on a free loopback port (``api.url``), stopped after."""
    api = KubeStandin(token).start()
    try:
        yield api
    finally:
        api.stop()
