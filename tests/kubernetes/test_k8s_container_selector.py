"""``process: {pod: {namespace, labels, container}}`` on ``--target kubernetes``: rank 1's
``worker`` container of a training job, told apart from rank 0's worker and from rank 1's
sidecar, which run the very same command line.

Stand-in: the Kubernetes API (gameday/testing/kube.py over real HTTP, driven by the REAL
``kubernetes`` client): it lists the pods, their containers and their containers' IDs,
as a kubelet reports them. Real: the containers' cgroups (real cgroup v1 ``pids`` groups
named as containerd's systemd driver names them, ``...cri-containerd-ID.scope``), the
processes in them and the signals, a real ``gameday agent serve --backend host`` process
with a policy, the session and ledger, and ``gameday plan`` as a user runs it.
"""

import json
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from chaoslib.exceptions import ActivityFailed

import faults.process
from gameday.engine import session as sessions
from gameday.evidence.ledger import read_ledger
from gameday.experiment.extension import Extension
from gameday.node.cgroups import BoundedGroup, detect
from gameday.node.processes import process_state
from gameday.safety.targetconfig import TargetConfig
from gameday.targets.kubernetes.target import kubernetes_target
from gameday.testing.kube import KubeStandin, running_standin
from tests.agent.agent_marker import kill, read_url, run_agent
from tests.conftest import cli_env, gameday, write_experiment
from tests.kubernetes.k8s_cluster import AGENT_TOKEN, NAMESPACE, api_configuration, register_agent
from tests.node.storage_support import PREFIX, our_cgroups
from tests.waiting import wait_until

pytestmark = pytest.mark.skipif(detect().version("pids") != 1,
                                reason="this host has no cgroup v1 pids hierarchy")

JOBS = "training"
WORKER = "import time; time.sleep(120)"
MARKER = "gdk8sc-worker"


@dataclass
class Container:
    pod: str
    name: str
    container_id: str
    group: BoundedGroup
    process: subprocess.Popen[bytes]

    def alive(self) -> bool:
        return process_state(self.process.pid) not in (None, "Z", "X")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[KubeStandin, str, Path]]:
    """The API stand-in and one real host agent (node ``n0``) that may signal only
    processes in this test's cgroups."""
    tmp = tmp_path_factory.mktemp("k8s-containers")
    token = tmp / "token"
    token.write_text(AGENT_TOKEN + "\n")
    token.chmod(0o600)
    policy = tmp / "policy.yaml"
    policy.write_text(f"kinds: [process.kill, process.pause]\n"
                      f"processes: {{cgroups: ['/{PREFIX}-kubepods']}}\n")
    agent = run_agent(["--backend", "host", "--listen", "127.0.0.1:0", "--token-file",
                       str(token), "--state-dir", str(tmp / "state"), "--node", "n0",
                       "--policy", str(policy)], cli_env(tmp), tmp / "agent.stderr")
    try:
        url = read_url(agent, timeout_s=30)
        with running_standin() as api:
            api.add_secret(NAMESPACE, "gameday-agent-token", {"token": AGENT_TOKEN})
            register_agent(api, "n0", url)
            api.add_node("n9")  # a node without an agent
            yield api, url, tmp
    finally:
        kill(agent)


@pytest.fixture
def job(cluster: tuple[KubeStandin, str, Path]) -> Iterator[dict[str, Container]]:
    """Pods train-0 (worker) and train-1 (worker, sidecar, and a loader still being
    created) of job llama; each running container is a real process in a cgroup of its
    own, all with the same command line."""
    api, _, _ = cluster
    made: dict[str, Container] = {}
    pods = BoundedGroup(f"{PREFIX}-kubepods", ("pids",))  # the policy allows what is below
    pods.create()
    try:
        for pod, names in (("train-0", ("worker",)), ("train-1", ("worker", "sidecar"))):
            ids: dict[str, str | None] = {}
            for name in names:
                cid = secrets.token_hex(32)
                group = BoundedGroup(f"{PREFIX}-kubepods/cri-containerd-{cid}.scope",
                                     ("pids",))
                group.create()
                process = subprocess.Popen([sys.executable, "-c", WORKER, MARKER])
                made[f"{pod}/{name}"] = Container(pod, name, cid, group, process)
                group.add(process.pid)
                ids[name] = f"containerd://{cid}"
            if pod == "train-1":
                ids["loader"] = None
            api.add_pod(JOBS, pod, "n0", labels={"job": "llama", "rank": pod[-1]},
                        containers=ids)
        api.add_pod(JOBS, "stray", "n9", labels={"job": "other"},
                    containers={"main": f"containerd://{secrets.token_hex(32)}"})
        yield made
    finally:
        for container in made.values():
            if container.process.poll() is None:
                container.process.kill()
            container.process.wait()
            container.group.remove()
        pods.remove()
        with api.lock:
            api.pods = {key: pod for key, pod in api.pods.items() if key[0] != JOBS}
        assert our_cgroups() == []


@pytest.fixture
def session(cluster: tuple[KubeStandin, str, Path],
            tmp_path: Path) -> Iterator[sessions.Session]:
    api, _, _ = cluster
    target = kubernetes_target(api_configuration(api))
    session = sessions.activate(sessions.Session(
        target=target, ledger_path=tmp_path / "ledger.jsonl", extension=Extension(lease_s=30),
        target_config=TargetConfig(allowed_namespaces=frozenset({JOBS}), source="test")))
    try:
        yield session
    finally:
        session.close()
        sessions.deactivate()


def _rank1(container: str | None = "worker", **extra: Any) -> dict[str, Any]:
    pod: dict[str, Any] = {"namespace": JOBS, "labels": {"job": "llama", "rank": 1}}
    if container is not None:
        pod["container"] = container
    return {"pod": pod, **extra}


def test_kill_signals_only_that_container_of_that_pod(
        job: dict[str, Container], session: sessions.Session) -> None:
    result = faults.process.kill(process=_rank1())
    wait_until(lambda: not job["train-1/worker"].alive())
    assert job["train-0/worker"].alive() and job["train-1/sidecar"].alive()
    [fault] = result["faults"]
    assert fault["node"] == "n0"
    assert fault["target"]["pod"] == f"{JOBS}/train-1"
    assert fault["target"]["container"] == "worker"
    assert fault["target"]["cgroup"] == job["train-1/worker"].container_id
    assert [p["pid"] for p in fault["details"]["processes"]] == [job["train-1/worker"].process.pid]
    [entry] = read_ledger(session.ledger.path)
    assert entry["target"]["pod"] == f"{JOBS}/train-1" and entry["node"] == "n0"


def test_pause_stops_the_container_until_revert(
        job: dict[str, Container], session: sessions.Session) -> None:
    faults.process.pause(process=_rank1("sidecar", cmdline=MARKER))
    sidecar = job["train-1/sidecar"].process.pid
    wait_until(lambda: process_state(sidecar) == "T")
    assert process_state(job["train-1/worker"].process.pid) == "S"
    faults.process.revert()
    wait_until(lambda: process_state(sidecar) != "T")
    assert all(c.alive() for c in job.values())


@pytest.mark.parametrize(("selector", "message"), [
    ({"pod": {"namespace": JOBS, "labels": {"job": "llama"}, "container": "worker"}},
     "process.pod: 2 Running pods in namespace training match 'job=llama' (train-0, train-1)"),
    (_rank1(None), "process.pod.container: pod training/train-1 has 3 containers "
                   "(worker, sidecar, loader); say which"),
    (_rank1("trainer"), "process.pod.container: pod training/train-1 has no container "
                        "'trainer' (containers: worker, sidecar, loader)"),
    (_rank1("loader"), "process.pod: container loader of pod training/train-1 is not "
                       "running (waiting: ContainerCreating)"),
    ({"pod": {"namespace": JOBS, "labels": {"rank": "7"}}},
     "process.pod: no Running pod in namespace training matches 'rank=7'"),
    ({"pod": {"namespace": JOBS, "name": "stray"}},
     "process.pod: pod training/stray runs on node n9, which runs no ready gameday agent"),
    ({"pod": {"namespace": JOBS, "name": "train-0", "labels": {"rank": "0"}}},
     "process.pod: give exactly one of labels, label_selector, name"),
    ({"pod": {"labels": {"rank": "0"}}}, "process.pod.namespace: needs the pod's namespace"),
    ({"pod": {"namespace": JOBS, "name": "train-0", "image": "x"}},
     "process.pod.image: unknown key"),
    (_rank1(node="n0"), "process.node: the pod says where and which cgroup; drop this key"),
    ({"pod": {"namespace": "kube-system", "name": "coredns"}},
     "namespace kube-system is not in the allowlist"),
])
def test_a_bad_pod_selector_is_one_line_and_signals_nothing(
        job: dict[str, Container], session: sessions.Session, selector: dict[str, Any],
        message: str) -> None:
    with pytest.raises(ActivityFailed) as failed:
        faults.process.kill(process=selector)
    assert message in str(failed.value) and "\n" not in str(failed.value)
    assert all(c.alive() for c in job.values())
    assert read_ledger(session.ledger.path) == []


def test_pod_on_a_target_that_is_not_kubernetes_is_refused(
        cluster: tuple[KubeStandin, str, Path]) -> None:
    from gameday.targets.base import host_target

    target = host_target({"agent_url": cluster[1], "agent_token": AGENT_TOKEN})
    sessions.activate(sessions.Session(target=target, extension=Extension()))
    try:
        with pytest.raises(ActivityFailed, match=r"process\.pod: pod selects a container on "
                                                 r"--target kubernetes"):
            faults.process.kill(process=_rank1())
    finally:
        sessions.deactivate()


def test_plan_shows_the_container_and_the_process_it_matches(
        job: dict[str, Container], cluster: tuple[KubeStandin, str, Path],
        tmp_path: Path) -> None:
    api, _, _ = cluster
    path = write_experiment(tmp_path / "rank1.yaml", {
        "version": "1.0.0", "title": "kill rank 1's worker", "description": "plan",
        "extensions": [{"name": "gameday", "target": "kubernetes",
                        "blast_radius": {"max_nodes": 1}}],
        "method": [{"type": "action", "name": "kill-rank-1",
                    "provider": {"type": "python", "module": "faults.process", "func": "kill",
                                 "arguments": {"process": _rank1()}}}]})
    env = {**cli_env(tmp_path), "GAMEDAY_K8S_API_URL": api.url,
           "GAMEDAY_K8S_API_TOKEN": api.token}
    env.pop("GAMEDAY_AGENT_TOKEN", None)  # read from the Secret, as in a cluster
    done = gameday(["plan", str(path), "--output", "json"], env)
    assert done.returncode == 0, done.stdout + done.stderr
    [hit] = json.loads(done.stdout)["plan"]["faults"][0]["hits"]
    worker = job["train-1/worker"]
    assert hit["node"] == "n0" and hit["status"] == 200
    assert hit["target"] == {"cgroup": worker.container_id, "pod": f"{JOBS}/train-1",
                             "container": "worker"}
    assert [p["pid"] for p in hit["matches"]["processes"]] == [worker.process.pid]
    text = gameday(["plan", str(path)], env).stdout
    assert f"container=worker,pod={JOBS}/train-1" in text
    assert f"processes {worker.process.pid} " in text
    assert all(c.alive() for c in job.values())  # a plan signals nothing
    assert os.path.exists(worker.group.paths()[0])
