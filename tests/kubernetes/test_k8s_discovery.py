"""Discovery and selectors of ``--target kubernetes``.

Stand-ins: the Kubernetes API (gameday/testing/kube.py, real HTTP, used through the REAL
``kubernetes`` client) and the GPUs (the lab's virtual GPUs). Real: three agent
processes (``gameday agent serve --backend virtual``) on loopback, their HTTP API and
inventories; the kubeconfig loader of the real client.
"""

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from gameday.errors import InvalidInput, TargetUnavailable
from gameday.kube import pages
from gameday.kube.config import api_client, settings_from
from gameday.targets.kubernetes.target import KubernetesTarget, kubernetes_target
from gameday.targets.open import open_target
from gameday.testing.kube import KubeStandin, running_standin
from gameday.wire.agent_client import AgentClient
from tests.kubernetes.k8s_cluster import (
    AGENT_TOKEN,
    NAMESPACE,
    agent_url,
    api_configuration,
    register_agent,
    spawn_agent_process,
    stop_process,
)

NODES = {"gpu-a": {"pool": "train", "nvidia.com/gpu.product": "H100"},
         "gpu-b": {"pool": "train", "nvidia.com/gpu.product": "H100"},
         "gpu-c": {"pool": "serve", "nvidia.com/gpu.product": "L40S"}}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[KubeStandin, Any]]:
    tmp = tmp_path_factory.mktemp("gdk8s-discovery")
    processes = []
    with running_standin() as api:
        try:
            processes = [spawn_agent_process(tmp, node) for node in NODES]  # in parallel
            for (node, labels), process in zip(NODES.items(), processes, strict=True):
                register_agent(api, node, agent_url(tmp, node, process), labels)
            api.add_secret(NAMESPACE, "gameday-agent-token", {"token": AGENT_TOKEN})
            # an agent pod that is not Ready yet, and a node without GPUs or agent
            api.add_node("cpu-x", {"pool": "cpu"})
            api.add_pod(NAMESPACE, "gameday-agent-cpu-x", "cpu-x",
                        labels={"app.kubernetes.io/name": "gameday-agent"}, port=1,
                        ready=False)
            # shard pods: shard 0 on gpu-b's GPU 3 (by index), shard 1 by UUID on gpu-c
            api.add_pod("serving", "shard-0", "gpu-b",
                        labels={"gameday.dev/shard": "0", "gameday.dev/gpu-index": "3"})
            target = kubernetes_target(api_configuration(api))
            uuid = next(g.uuid for g in target.gpus() if g.node == "gpu-c" and g.index == 1)
            api.add_pod("serving", "shard-1", "gpu-c",
                        labels={"gameday.dev/shard": "1", "gameday.dev/gpu-uuid": uuid})
            yield api, processes
        finally:
            for process in processes:
                assert stop_process(process) == 0


def test_agents_are_found_through_the_api_with_their_gpus(cluster: Any) -> None:
    api, _ = cluster
    target = open_target("kubernetes", api_configuration(api), lab_dir=Path("/nonexistent"))
    assert isinstance(target, KubernetesTarget) and target.fleet is not None
    assert sorted(target.agents) == ["gpu-a", "gpu-b", "gpu-c"]  # cpu-x: not Ready
    assert len(target.gpus()) == 12
    assert target.fleet.node_labels["gpu-c"]["pool"] == "serve"
    for node, client in target.agents.items():
        assert client.health()["node"] == node
    # the token came from the Secret: the agents accepted it
    assert any(path == f"/api/v1/namespaces/{NAMESPACE}/secrets/gameday-agent-token"
               for _, path, _ in api.requests)


def test_the_fleet_read_a_page_at_a_time_is_the_same_fleet(
        cluster: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Agent pods, nodes and shard pods listed one object per page (``limit=1``, each
    ``continue`` followed) make the same fleet as the default pages."""
    api, _ = cluster
    whole = kubernetes_target(api_configuration(api))
    monkeypatch.setattr(pages, "PAGE_SIZE", 1)
    before = len(api.requests)
    paged = kubernetes_target(api_configuration(api))
    lists = [path for _, path, _ in api.requests[before:]
             if path in ("/api/v1/nodes", "/api/v1/pods", f"/api/v1/namespaces/{NAMESPACE}/pods")]
    assert len(lists) >= 4 + 4 + 2  # agent pods, nodes, shard pods: a request per object
    assert paged.fleet is not None and whole.fleet is not None
    assert paged.fleet.gpus == whole.fleet.gpus and len(paged.fleet.gpus) == 12
    assert any(g.shards for g in paged.fleet.gpus)
    assert paged.fleet.node_labels == whole.fleet.node_labels
    assert sorted(paged.agents) == sorted(whole.agents) == ["gpu-a", "gpu-b", "gpu-c"]


def test_selectors(cluster: Any) -> None:
    api, _ = cluster
    target = kubernetes_target(api_configuration(api))

    def labels(selector: dict[str, Any]) -> list[str]:
        return [g.label() for g in target.resolve_gpus(selector)]

    assert labels({"node_labels": {"pool": "serve"}, "index": [0, 1]}) == \
        ["gpu-c/gpu0", "gpu-c/gpu1"]
    assert labels({"holding_shard": 0}) == ["gpu-b/gpu3"]
    assert labels({"holding_shard": 1}) == ["gpu-c/gpu1"]
    assert target.placement()["shards"] == [{"shard": 0, "node": "gpu-b", "gpu": 3},
                                            {"shard": 1, "node": "gpu-c", "gpu": 1}]
    uuid = target.gpus()[5].uuid
    assert labels({"uuid": uuid}) == [target.gpus()[5].label()]
    assert labels({"nvlink_domain": "gpu-a", "index": 2}) == ["gpu-a/gpu2"]
    quarter = labels({"percent": 25})
    assert len(quarter) == 3 and quarter == labels({"percent": 25})  # reproducible
    assert labels({"percent": 25, "seed": 7}) != quarter or len(set(quarter)) == 3
    assert len(labels({"node_labels": {"pool": "train"}, "percent": 50})) == 4
    with pytest.raises(InvalidInput, match=r"gpu\.colour: unknown selector key"):
        target.resolve_gpus({"colour": "red"})
    with pytest.raises(InvalidInput, match="matches no GPU"):
        target.resolve_gpus({"node_labels": {"pool": "cpu"}})
    with pytest.raises(InvalidInput, match=r"percent: must be a number in \(0, 100\]"):
        target.resolve_gpus({"percent": 0})
    assert target.resolve_nodes({"labels": {"pool": "train"}}, count=5) == ["gpu-a", "gpu-b"]
    assert target.resolve_nodes({"gpu": {"holding_shard": 1}}) == ["gpu-c"]
    with pytest.raises(InvalidInput, match="cpu-x runs no ready gameday agent"):
        target.resolve_nodes({"name": "cpu-x"})


def test_an_unreachable_agent_is_left_out_and_named(cluster: Any, tmp_path: Path) -> None:
    api, _ = cluster
    register_agent(api, "gpu-gone", "http://127.0.0.1:9", {"pool": "train"})
    try:
        target = kubernetes_target(api_configuration(api))
        assert target.fleet is not None and "gpu-gone" in target.fleet.unreachable
        assert "gpu-gone" not in target.agents and len(target.gpus()) == 12
    finally:
        with api.lock:
            del api.nodes["gpu-gone"]
            del api.pods[(NAMESPACE, "gameday-agent-gpu-gone")]


def test_kubeconfig_and_in_cluster_configuration(cluster: Any, tmp_path: Path) -> None:
    api, _ = cluster
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "standin",
        "clusters": [{"name": "standin", "cluster": {"server": api.url}}],
        "users": [{"name": "me", "user": {"token": api.token}}],
        "contexts": [{"name": "standin", "context": {"cluster": "standin", "user": "me"}}]}))
    target = kubernetes_target({"kubeconfig": str(kubeconfig)})
    assert sorted(target.agents) == ["gpu-a", "gpu-b", "gpu-c"]
    # in-cluster: the service account's files and env (the stand-in has no TLS, so only
    # the configuration is checked, no request is made)
    token, ca = tmp_path / "token", tmp_path / "ca.crt"
    token.write_text("sa-token")
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    from kubernetes import client
    from kubernetes.config.incluster_config import InClusterConfigLoader

    configuration = client.Configuration()
    InClusterConfigLoader(token_filename=str(token), cert_filename=str(ca), environ={
        "KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"},
    ).load_and_set(configuration)
    assert configuration.host == "https://10.0.0.1:443"
    assert configuration.auth_settings()["BearerToken"]["value"].lower() == "bearer sa-token"
    # no kubeconfig and no service account: one line
    with pytest.raises(TargetUnavailable, match="cannot configure the API client"):
        api_client(settings_from({"kubeconfig": str(tmp_path / "missing")}))


def test_a_wrong_token_or_no_agents_is_one_line(tmp_path: Path) -> None:
    with running_standin() as api:
        with pytest.raises(TargetUnavailable, match=r"cannot read Secret gameday-system/"
                                                     r"gameday-agent-token .*404"):
            kubernetes_target(api_configuration(api))
        api.add_secret(NAMESPACE, "gameday-agent-token", {"token": AGENT_TOKEN})
        with pytest.raises(TargetUnavailable, match="no ready agent pod in namespace"):
            kubernetes_target(api_configuration(api))
        with pytest.raises(TargetUnavailable, match="401"):
            kubernetes_target(api_configuration(api, k8s_api_token="wrong"))


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2 ** 16))
def test_gpus_are_listed_and_picked_in_node_index_order_whatever_order_agents_answer(
        cluster: Any, seed: int) -> None:
    """The agents' inventories answer their GPUs in a random order (a real host lists
    them as NVML enumerates them): discovery still lists the fleet in (node, index)
    order, and a seeded percentage picks the same GPUs as from in-order answers."""
    api, _ = cluster
    in_order = kubernetes_target(api_configuration(api))
    real = AgentClient.inventory

    def shuffled(client: AgentClient) -> dict[str, Any]:
        answer = real(client)
        random.Random(seed).shuffle(answer["gpus"])
        return answer

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(AgentClient, "inventory", shuffled)
        target = kubernetes_target(api_configuration(api))
    listed = [(g.node, g.index) for g in target.gpus()]
    assert listed == sorted(listed) == [(g.node, g.index) for g in in_order.gpus()]
    for selector in ({"percent": 25, "seed": seed}, {"node_labels": {"pool": "train"}}):
        assert ([g.label() for g in target.resolve_gpus(selector)]
                == [g.label() for g in in_order.resolve_gpus(selector)])
