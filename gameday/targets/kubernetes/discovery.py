"""Discovery: the agents of a cluster, found through the Kubernetes API, and their GPUs.

1. The agent DaemonSet's pods: ``GET pods`` in the agents' namespace with the agents'
   label selector; a pod counts when it is Running, Ready and has an IP. Its URL is
   ``http://<podIP>:<port>`` (``https://`` when TLS is configured,
   :mod:`gameday.targets.agent_tls`), the port being the container port named ``agent``
   (or ``k8s_agent_port``, else 9410).
2. Their nodes: ``GET nodes``, for the node labels selectors use.
3. The shards: pods labelled ``gameday.dev/shard=<N>`` (any namespace) say which GPU they
   hold with ``gameday.dev/gpu-uuid=<UUID>`` or ``gameday.dev/gpu-index=<i>`` (on the
   pod's node); that is the placement ``{holding_shard: N}`` selects from.
4. Every agent's GPU inventory: ``GET /v1/inventory`` on each agent, concurrently. A
   GPU's NVLink domain is the agent's ``nvlink_domain``, else the node's
   ``nvidia.com/gpu.clique`` label, else the node.

An agent that does not answer is left out of the fleet and named in
:attr:`Fleet.unreachable`; none answering is :class:`TargetUnavailable`.
"""

import base64
import binascii
import functools
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any

from gameday.errors import AgentError, TargetUnavailable
from gameday.kube.config import DEFAULT_AGENT_PORT, KubeSettings
from gameday.kube.pages import paged
from gameday.targets.agent_tls import AgentTLS
from gameday.targets.base import GpuRef
from gameday.wire.agent_client import AgentClient

__all__ = ["GPU_INDEX_LABEL", "GPU_UUID_LABEL", "SHARD_LABEL", "AgentPod", "Fleet", "FleetGpu",
           "ShardPlacement", "agent_server_name", "agent_token", "discover"]

SHARD_LABEL = "gameday.dev/shard"
#: GPU Feature Discovery's NVLink clique: the NVLink domain when the agent reports none.
CLIQUE_LABEL = "nvidia.com/gpu.clique"
GPU_UUID_LABEL = "gameday.dev/gpu-uuid"
GPU_INDEX_LABEL = "gameday.dev/gpu-index"

#: Inventory reads in flight at once during discovery.
DISCOVERY_CONCURRENCY = 32


@dataclass(frozen=True)
class AgentPod:
    """One agent pod of the DaemonSet: where it runs and where it listens."""

    pod: str
    namespace: str
    node: str
    url: str


@dataclass(frozen=True)
class ShardPlacement:
    """A shard-serving pod and the GPU it holds (from its labels)."""

    shard: str
    pod: str
    namespace: str
    node: str
    gpu_uuid: str = ""
    gpu_index: int | None = None


@dataclass(frozen=True)
class FleetGpu:
    """One GPU of the fleet with everything a selector may ask about."""

    node: str
    index: int
    uuid: str
    nvlink_domain: str
    node_labels: Mapping[str, str] = field(default_factory=dict, compare=False, hash=False)
    shards: tuple[str, ...] = ()

    @functools.cached_property
    def ref(self) -> GpuRef:
        """This GPU as a target names it (made once, and shared: it is immutable)."""
        return GpuRef(node=self.node, index=self.index, uuid=self.uuid,
                      nvlink_domain=self.nvlink_domain)


@dataclass
class Fleet:
    """What discovery found: agents (and a client for each) by node, node labels, GPUs
    (in (node, index) order), shard placement."""

    agents: dict[str, AgentPod]
    clients: dict[str, AgentClient]
    node_labels: dict[str, dict[str, str]]
    gpus: list[FleetGpu]
    placement: list[ShardPlacement]
    unreachable: dict[str, str] = field(default_factory=dict)  # node -> why


def agent_token(core: Any, settings: KubeSettings) -> str:
    """The agents' bearer token: from settings/env, else the Secret (key ``token``)."""
    if settings.agent_token:
        return settings.agent_token
    from kubernetes.client.exceptions import ApiException

    try:
        secret = core.read_namespaced_secret(settings.token_secret, settings.namespace)
    except ApiException as exc:
        raise TargetUnavailable(
            f"target kubernetes: cannot read Secret {settings.namespace}/"
            f"{settings.token_secret} for the agent token ({exc.status} {exc.reason}); "
            "set agent_token with --var KEY=VALUE, in the experiment's configuration (a "
            "value or {type: env, key: NAME}), in its secrets (any scope), or in the "
            "environment as GAMEDAY_AGENT_TOKEN") from None
    encoded = (secret.data or {}).get("token")
    try:
        token = base64.b64decode(encoded or "", validate=True).decode("utf-8").strip()
    except (binascii.Error, UnicodeDecodeError):
        token = ""
    if not token:
        raise TargetUnavailable(f"target kubernetes: Secret {settings.namespace}/"
                                f"{settings.token_secret} has no key 'token'")
    return token


def _agent_port(pod: Any, settings: KubeSettings) -> int:
    if settings.agent_port:
        return settings.agent_port
    for container in pod.spec.containers or []:
        for port in container.ports or []:
            if port.name == "agent":
                return int(port.container_port)
    return DEFAULT_AGENT_PORT


def _ready(pod: Any) -> bool:
    if pod.status is None or pod.status.phase != "Running" or not pod.status.pod_ip:
        return False
    conditions = pod.status.conditions or []
    return any(c.type == "Ready" and c.status == "True" for c in conditions)


def agent_pods(core: Any, settings: KubeSettings, *, scheme: str = "http") -> list[AgentPod]:
    """The Running, Ready agent pods (one per node; the first by name wins), their URLs
    ``scheme://POD_IP:PORT``."""
    from kubernetes.client.exceptions import ApiException

    ready: list[AgentPod] = []
    try:
        for pod in paged(core.list_namespaced_pod, settings.namespace,
                         label_selector=settings.agent_selector):
            if not _ready(pod) or not pod.spec.node_name:
                continue
            ip = pod.status.pod_ip
            host = f"[{ip}]" if ":" in ip else ip
            ready.append(AgentPod(
                pod=pod.metadata.name, namespace=pod.metadata.namespace or settings.namespace,
                node=pod.spec.node_name, url=f"{scheme}://{host}:{_agent_port(pod, settings)}"))
    except ApiException as exc:
        raise TargetUnavailable(
            f"target kubernetes: cannot list agent pods in {settings.namespace} "
            f"({settings.agent_selector}): {exc.status} {exc.reason}") from None
    found: dict[str, AgentPod] = {}
    for agent in sorted(ready, key=attrgetter("pod")):
        found.setdefault(agent.node, agent)
    return list(found.values())


def shard_placement(core: Any) -> list[ShardPlacement]:
    """Shard pods (label ``gameday.dev/shard``) and the GPU each says it holds."""
    placed = []
    for pod in paged(core.list_pod_for_all_namespaces, label_selector=SHARD_LABEL):
        labels = pod.metadata.labels or {}
        if not pod.spec.node_name or pod.status is None or pod.status.phase != "Running":
            continue
        index = labels.get(GPU_INDEX_LABEL)
        placed.append(ShardPlacement(
            shard=str(labels[SHARD_LABEL]), pod=pod.metadata.name,
            namespace=pod.metadata.namespace or "", node=pod.spec.node_name,
            gpu_uuid=labels.get(GPU_UUID_LABEL, ""),
            gpu_index=int(index) if index is not None and index.isdigit() else None))
    return placed


def agent_server_name(namespace: str) -> str:
    """The name the agents' certificate carries by default (deploy/kubernetes/cert-manager/)."""
    return f"gameday-agent.{namespace}.svc"


def discover(core: Any, settings: KubeSettings, token: str,
             tls: AgentTLS | None = None) -> Fleet:
    """Build the fleet from agent pods, node labels, shard pods and the agents'
    inventories (read with ``token``). With ``tls`` configured the agents are reached
    over https, their certificates checked for ``tls.server_name``, else
    ``gameday-agent.NAMESPACE.svc`` (deploy/kubernetes/cert-manager/)."""
    tls = tls or AgentTLS()
    agents = {pod.node: pod for pod in agent_pods(
        core, settings, scheme="https" if tls.configured else "http")}
    context = tls.context()
    name = tls.server_name or agent_server_name(settings.namespace)
    clients = {node: AgentClient(pod.url, token, tls=context,
                                 server_name=name if context is not None else None)
               for node, pod in agents.items()}
    node_labels = {node.metadata.name: dict(node.metadata.labels or {})
                   for node in paged(core.list_node)}
    placement = shard_placement(core)

    def inventory(node: str) -> tuple[str, dict[str, Any] | str]:
        try:
            return node, clients[node].inventory()
        except AgentError as exc:
            return node, str(exc)

    with ThreadPoolExecutor(max_workers=DISCOVERY_CONCURRENCY,
                            thread_name_prefix="k8s-discovery") as pool:
        answers = pool.map(inventory, sorted(n for n in agents if n in clients))
        gpus, unreachable = _fleet_gpus(answers, node_labels, placement)
    if agents and len(unreachable) == len(agents):
        first = next(iter(unreachable.items()))
        raise TargetUnavailable(f"target kubernetes: no agent answered ({len(agents)} tried; "
                                f"{first[0]}: {first[1]})")
    return Fleet(agents={n: a for n, a in agents.items() if n not in unreachable},
                 clients={n: c for n, c in clients.items() if n not in unreachable},
                 node_labels=node_labels, gpus=gpus, placement=placement,
                 unreachable=unreachable)


def _fleet_gpus(answers: Iterator[tuple[str, dict[str, Any] | str]],
                node_labels: Mapping[str, Mapping[str, str]],
                placement: list[ShardPlacement]
                ) -> tuple[list[FleetGpu], dict[str, str]]:
    """The fleet's GPUs in (node, index) order, and the agents that did not answer (why),
    from the inventories as they come (each let go once read: a fleet's answers are
    never all held at once)."""
    gpus: list[FleetGpu] = []
    unreachable: dict[str, str] = {}
    placed: dict[str, list[ShardPlacement]] = {}  # by node
    for shard in placement:
        placed.setdefault(shard.node, []).append(shard)
    for node, answer in answers:
        if isinstance(answer, str):
            unreachable[node] = answer
            continue
        for gpu in answer.get("gpus", []):
            index, uuid = int(gpu["index"]), str(gpu.get("uuid", ""))
            shards = tuple(sorted(
                p.shard for p in placed.get(node, ())
                if ((p.gpu_uuid and p.gpu_uuid == uuid) or p.gpu_index == index)))
            gpus.append(FleetGpu(node=node, index=index, uuid=uuid,
                                 nvlink_domain=str(gpu.get("nvlink_domain") or node_labels.get(
                                     node, {}).get(CLIQUE_LABEL) or node),
                                 node_labels=node_labels.get(node, {}), shards=shards))
    gpus.sort(key=attrgetter("node", "index"))  # the order selectors keep
    return gpus, unreachable
