"""gameday.testing, the helpers users test their experiments with: a real agent serving
over loopback HTTP (the lab's virtual GPUs, the stand-in for NVML on a machine without
GPUs, or the marker backend of tests.agent.agent_marker), an experiment run through the
engine, and the Kubernetes API stand-in (gameday.testing.kube, real HTTP; no cluster
exists here)."""

import signal
from pathlib import Path

import pytest
import requests
import yaml

from gameday import clock, testing
from gameday.errors import AgentError
from gameday.testing.kube import running_standin
from tests.agent.agent_marker import KIND, MarkerBackend


def test_fake_clock_is_the_clock_gameday_takes() -> None:
    assert testing.FakeClock is clock.FakeClock


def test_the_agent_serves_the_virtual_gpus_over_http_behind_its_token() -> None:
    with testing.agent(node="node-7", gpus=3) as node:
        assert node.url.startswith("http://127.0.0.1:")
        client = node.client()
        assert client.health()["node"] == "node-7"
        inventory = client.inventory()
        assert [gpu["index"] for gpu in inventory["gpus"]] == [0, 1, 2]
        assert "gpu.ecc" in inventory["kinds"]
        with pytest.raises(AgentError) as refused:
            testing.RunningAgent(node.url, "wrong-token", node.node, node.server).client() \
                .inventory()
        assert refused.value.status == 401
        assert node.variables() == {"agent_url": node.url, "agent_token": node.token}


def test_leaving_the_block_reverts_what_the_agent_still_holds(tmp_path: Path) -> None:
    markers = MarkerBackend(tmp_path / "markers")
    with testing.agent(markers, node="node-0") as node:
        fault = node.client().inject(KIND, {"what": "left"}, {}, 30)
        assert markers.markers() == {fault["id"]}
        assert [f["id"] for f in node.active_faults()] == [fault["id"]]
    assert markers.markers() == set()
    assert markers.reverts == [fault["id"]]


def test_run_experiment_runs_through_the_engine_and_restores_the_signal_handlers(
        tmp_path: Path) -> None:
    path = tmp_path / "plain.yaml"
    path.write_text(yaml.safe_dump({
        "version": "1.0.0", "title": "a plain run", "description": "no target",
        "method": [{"type": "probe", "name": "sum",
                    "provider": {"type": "python", "module": "tests.fixtures.acts",
                                 "func": "value", "arguments": {"result": 3}}}]}))
    before = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    run = testing.run_experiment(path, home=tmp_path / "home")
    assert {signum: signal.getsignal(signum) for signum in before} == before
    assert run.exit_code == 0, run.output
    assert run.journal["status"] == "completed" and run.journal_path is not None
    assert run.journal["run"][0]["output"] == 3
    assert (tmp_path / "home" / "journal.json") == run.journal_path


def test_run_experiment_gives_bad_input_as_exit_2_and_one_line(tmp_path: Path) -> None:
    run = testing.run_experiment(tmp_path / "missing.yaml", home=tmp_path / "home")
    assert run.exit_code == 2 and run.journal == {} and run.journal_path is None
    assert run.output.count("\n") == 1 and "missing.yaml" in run.output


def test_the_kubernetes_stand_in_answers_over_http_behind_its_token() -> None:
    with running_standin(token="t0k") as api:
        api.add_node("gpu-a", {"pool": "train"})
        listed = requests.get(f"{api.url}/api/v1/nodes", params={"labelSelector": "pool=train"},
                              headers={"Authorization": "Bearer t0k"}, timeout=5)
        assert listed.status_code == 200
        assert [n["metadata"]["name"] for n in listed.json()["items"]] == ["gpu-a"]
        assert requests.get(f"{api.url}/api/v1/nodes", timeout=5).status_code == 401
