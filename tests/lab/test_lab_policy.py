"""The lab ships its agents' policy: it passes ``gameday agent policy --check``, allows
exactly the kinds a lab node's backend offers (the head node: the router's too), and
refuses the rest and longer leases through the registry's limits, as a lab agent does."""

from pathlib import Path

import pytest

from gameday.agent.policy import load_policy
from gameday.agent.serve import check_policy
from gameday.errors import PolicyRefused
from gameday.lab.devices import VirtualGpuBackend
from gameday.lab.layout import LabPaths
from gameday.lab.link import LabLink
from gameday.lab.node import POLICY
from gameday.lab.nodebackend import NodeBackend, NodeContext, node_handlers


def test_the_lab_policy_allows_what_the_lab_offers_and_caps_it(tmp_path: Path) -> None:
    assert check_policy(["--check", str(POLICY)]) == 0
    policy = load_policy(POLICY)
    gpus = VirtualGpuBackend("n", tmp_path / "n", gpus=1)
    backend = NodeBackend(gpus, node_handlers(NodeContext(
        node="n", paths=LabPaths(tmp_path), link=LabLink("n", 0))))
    head_node = {"service.latency", "service.timeout"}  # the router's node offers these too
    assert policy.kinds == frozenset(backend.kinds()) | head_node
    limits = policy.limits()
    limits.check("gpu.ecc", 30)
    limits.check("service.latency", 30)
    with pytest.raises(PolicyRefused, match=r"k8s\.pod_kill is not allowed"):
        limits.check("k8s.pod_kill", 30)  # the orchestrator's, never a node agent's
    with pytest.raises(PolicyRefused, match="lease_s"):
        limits.check("gpu.ecc", policy.lease_max_s + 1)
