"""Placement on Kubernetes: shard pods joined with dcgm-exporter's GPU series.

Which GPU holds a shard is not in the Kubernetes API; dcgm-exporter knows it. With
its Kubernetes pod mapping on, every DCGM series of a GPU in use by a pod carries the
pod's ``pod`` and ``namespace`` labels next to ``gpu`` (index), ``UUID`` and the node's
hostname — labelled ``Hostname`` in dcgm-exporter releases and ``hostname`` on its
newest code; both are accepted. :class:`KubernetesPlacementSource` reads:

1. the shard pods (``GET pods`` with the label selector ``shard_label``, in
   ``namespace`` or all namespaces): shard number = the label's value; ``serving`` when
   the pod is Running and Ready, ``starting`` while Pending or not Ready, ``failed``
   when Failed/Succeeded or being deleted;
2. the nodes (``GET nodes``): a node's NVLink domain is its ``domain_label`` (GPU
   Feature Discovery's ``nvidia.com/gpu.clique`` on multi-node NVLink systems), else
   the node itself; a node marked unschedulable has its GPUs ``cordoned``;
3. from Prometheus, ``metric`` (default ``DCGM_FI_DEV_GPU_TEMP``): every GPU, and which
   pod uses it; and ``unhealthy`` (default: double-bit ECC errors or a critical Xid,
   the lab's alert rules): GPUs it returns are ``unhealthy``.

A Kubernetes cluster has no controller event log, so the placement has no events:
``verify_reshard`` then measures the time to re-shard from its own polls and the time
to detect from its ``detect`` signal (e.g. ``ALERTS``).
"""

from collections.abc import Mapping
from typing import Any

from gameday.errors import GamedayError, one_line
from gameday.promql import PromQL
from verifiers._promql import prometheus_url_of
from verifiers.placement import GpuState, Placement, PlacementError, ShardPlacement

__all__ = ["DEFAULT_METRIC", "DEFAULT_UNHEALTHY", "DOMAIN_LABEL", "HOSTNAME_LABELS",
           "SHARD_LABEL", "KubernetesPlacementSource", "kubernetes_source"]

SHARD_LABEL = "gameday.dev/shard"
DOMAIN_LABEL = "nvidia.com/gpu.clique"
DEFAULT_METRIC = "DCGM_FI_DEV_GPU_TEMP"
DEFAULT_UNHEALTHY = ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL > 0 or DCGM_FI_DEV_XID_ERRORS == 48 or "
                     "DCGM_FI_DEV_XID_ERRORS == 79 or DCGM_FI_DEV_XID_ERRORS == 94 or "
                     "DCGM_FI_DEV_XID_ERRORS == 95")
#: dcgm-exporter's hostname label: ``Hostname`` in releases, ``hostname`` on its main branch.
HOSTNAME_LABELS = ("Hostname", "hostname")

_KEYS = ("namespace", "shard_label", "metric", "unhealthy", "domain_label",
         "prometheus_url", "k8s_api_url", "k8s_api_token", "kubeconfig", "k8s_context")


def _hostname(labels: Mapping[str, str]) -> str | None:
    for key in HOSTNAME_LABELS:
        if labels.get(key):
            return labels[key]
    return None


def _pod_status(pod: Any) -> str:
    if pod.metadata.deletion_timestamp is not None:
        return "failed"
    phase = pod.status.phase if pod.status else None
    if phase in ("Failed", "Succeeded"):
        return "failed"
    conditions = (pod.status.conditions or []) if pod.status else []
    ready = any(c.type == "Ready" and c.status == "True" for c in conditions)
    return "serving" if phase == "Running" and ready else "starting"


class KubernetesPlacementSource:
    """Shard pods (Kubernetes API, official client) joined with dcgm-exporter series."""

    def __init__(self, core: Any, prometheus: PromQL, *, namespace: str | None = None,
                 shard_label: str = SHARD_LABEL, metric: str = DEFAULT_METRIC,
                 unhealthy: str | None = DEFAULT_UNHEALTHY,
                 domain_label: str = DOMAIN_LABEL, where: str = "kubernetes") -> None:
        self.core = core
        self.prometheus = prometheus
        self.namespace = namespace
        self.shard_label = shard_label
        self.metric = metric
        self.unhealthy = unhealthy
        self.domain_label = domain_label
        self.where = where

    def describe(self) -> str:
        scope = f"namespace {self.namespace}" if self.namespace else "all namespaces"
        return (f"kubernetes {self.where} pods {self.shard_label} ({scope}) joined with "
                f"{self.metric} at {self.prometheus.url}")

    def _read_api(self) -> tuple[list[Any], dict[str, Any]]:
        """The shard pods, and the nodes by name."""
        from kubernetes.client.exceptions import ApiException

        try:
            if self.namespace:
                answer = self.core.list_namespaced_pod(self.namespace,
                                                       label_selector=self.shard_label)
            else:
                answer = self.core.list_pod_for_all_namespaces(label_selector=self.shard_label)
            nodes = self.core.list_node()
        except ApiException as exc:
            raise PlacementError(f"kubernetes API at {self.where}: {exc.status} "
                                 f"{one_line(str(exc.reason), 120)}") from None
        except Exception as exc:  # urllib3 and socket errors of the client
            raise PlacementError(f"kubernetes API at {self.where}: "
                                 f"{type(exc).__name__}: {one_line(str(exc), 160)}") from None
        return list(answer.items), {node.metadata.name: node for node in nodes.items}

    def read(self) -> Placement:
        pods, nodes = self._read_api()
        try:
            series = self.prometheus.instant(self.metric)
            bad = self.prometheus.instant(self.unhealthy) if self.unhealthy else []
        except GamedayError as exc:
            raise PlacementError(str(exc)) from None
        gpus: dict[tuple[str, int], GpuState] = {}
        by_pod: dict[tuple[str, str], list[tuple[str, int, str]]] = {}
        unhealthy = {(_hostname(labels), labels.get("gpu")) for labels, _ in bad}
        for labels, _ in series:
            node, index = _hostname(labels), labels.get("gpu")
            if node is None or index is None or not index.isdigit():
                continue
            key = (node, int(index))
            node_object = nodes.get(node)
            node_labels = (node_object.metadata.labels or {}) if node_object else {}
            cordoned = bool(node_object and node_object.spec and
                            node_object.spec.unschedulable)
            state = ("unhealthy" if (node, index) in unhealthy
                     else "cordoned" if cordoned else "healthy")
            gpus[key] = GpuState(node=node, gpu=int(index), uuid=labels.get("UUID", ""),
                                 nvlink_domain=node_labels.get(self.domain_label) or node,
                                 state=state)
            if labels.get("pod"):
                by_pod.setdefault((labels.get("namespace", ""), labels["pod"]), []).append(
                    (node, int(index), labels.get("UUID", "")))
        shards = []
        for pod in pods:
            raw = (pod.metadata.labels or {}).get(self.shard_label, "")
            if not str(raw).isdigit():
                continue
            held = sorted(by_pod.get((pod.metadata.namespace, pod.metadata.name), []))
            where: tuple[str | None, int | None, str] = held[0] if held else (None, None, "")
            shards.append(ShardPlacement(
                shard=int(raw), node=where[0], gpu=where[1], uuid=where[2],
                status=_pod_status(pod) if held else "starting",
                url=f"pod/{pod.metadata.namespace}/{pod.metadata.name}"))
        return Placement(time=0.0, version=0, shards=tuple(sorted(shards, key=lambda s: s.shard)),
                         gpus=tuple(gpus[key] for key in sorted(gpus)))


def kubernetes_source(spec: Mapping[str, Any]) -> KubernetesPlacementSource:
    """A source from a verifier's ``{"kubernetes": {...}}`` placement argument.

    Keys: ``namespace`` (default: all), ``shard_label`` (``gameday.dev/shard``),
    ``metric``, ``unhealthy`` (``null`` for none), ``domain_label``, ``prometheus_url``
    (default: the run target's), and how to reach the API: ``k8s_api_url`` (+
    ``k8s_api_token``), else ``kubeconfig`` / ``k8s_context``, else the environment
    (``GAMEDAY_K8S_API_URL``, ``KUBECONFIG``) or the in-cluster service account.
    """
    unknown = sorted(set(spec) - set(_KEYS))
    if unknown:
        raise PlacementError(f"placement.kubernetes has unknown key {unknown[0]!r} "
                             f"(known: {', '.join(_KEYS)})")
    from kubernetes import client

    from gameday.kube.config import api_client, settings_from

    settings = settings_from({key: spec[key] for key in
                              ("k8s_api_url", "k8s_api_token", "kubeconfig", "k8s_context")
                              if spec.get(key)})
    try:
        core = client.CoreV1Api(api_client(settings))
    except GamedayError as exc:
        raise PlacementError(str(exc)) from None
    unhealthy = spec.get("unhealthy", DEFAULT_UNHEALTHY)
    return KubernetesPlacementSource(
        core, PromQL(prometheus_url_of(spec.get("prometheus_url"))),
        namespace=spec.get("namespace") or None,
        shard_label=str(spec.get("shard_label") or SHARD_LABEL),
        metric=str(spec.get("metric") or DEFAULT_METRIC),
        unhealthy=str(unhealthy) if unhealthy else None,
        domain_label=str(spec.get("domain_label") or DOMAIN_LABEL),
        where=settings.api_url or settings.kubeconfig or "in-cluster")
