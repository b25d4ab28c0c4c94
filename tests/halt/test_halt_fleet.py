"""``gameday halt`` over every agent gameday knows (real ``gameday`` processes, real
agents in-process over real HTTP; the lab's virtual GPUs stand in for NVML), agents that
do not answer included, and the lever's guarantee as a property: once an engage has
been answered, no fault is held and none is applied, whatever injects race it."""

import json
import random
import threading
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gameday.errors import AgentError
from gameday.wire.agent_client import AgentClient, AgentHalted
from tests.safety.safety_helpers import TOKEN, env_for, gameday, virtual_agents
from tests.verifiers.verifier_helpers import free_port

ECC = {"kind": "single_bit", "count": 1}


def _config(path: Path, urls: dict[str, str], token_file: Path) -> Path:
    path.write_text(yaml.safe_dump({"agents": [
        {"node": node, "url": url, "token_file": str(token_file)}
        for node, url in urls.items()]}))
    return path


def test_halt_status_release_over_the_target_configuration(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(0o600)
    with virtual_agents(tmp_path, nodes=2) as servers:
        urls = {name: server.url for name, server in servers.items()}
        dead = f"http://127.0.0.1:{free_port()}"
        config = _config(tmp_path / "target.yaml", {**urls, "node-gone": dead}, token_file)
        env = dict(env_for(tmp_path), GAMEDAY_LAB_DIR=str(tmp_path / "no-lab"))
        for server in servers.values():
            with AgentClient(server.url, TOKEN) as client:
                client.inject("gpu.ecc", {"gpu": 0}, ECC, 600)

        done = gameday(["halt", "--target-config", str(config), "--reason", "INC-7",
                        "--output", "json"], env)
        assert done.returncode == 1, done.stdout + done.stderr  # one agent did not answer
        document = json.loads(done.stdout)
        by_agent = {a["agent"]: a for a in document["agents"]}
        assert {by_agent[url]["engaged"] for url in urls.values()} == {True}
        assert all(by_agent[url]["active"] == 0 for url in urls.values())
        assert by_agent[dead]["engaged"] is None and "did not answer" in by_agent[dead]["error"]
        assert all(s.registry.faults() == [] for s in servers.values())
        assert all(s.lever.state.reason == "INC-7" for s in servers.values())

        status = gameday(["halt", "--status", "--target-config", str(config)], env)
        assert status.returncode == 1
        lines = status.stdout.splitlines()
        assert sum("halted by" in line and "INC-7" in line for line in lines) == 2
        assert any(line.startswith(dead) and "did not answer" in line for line in lines)

        released = gameday(["halt", "--release", "--target-config", str(config)], env)
        assert "released on 2 of 3 agent(s)" in released.stdout, released.stdout
        assert not any(s.lever.state.engaged for s in servers.values())

        nothing = gameday(["halt"], env)
        assert nothing.returncode == 2
        assert nothing.stderr.startswith("gameday: no agent known")
        assert len(nothing.stderr.strip().splitlines()) == 1


@settings(max_examples=12, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(injectors=st.integers(1, 6), batch=st.booleans(), delay_ms=st.integers(0, 30),
       seed=st.integers(0, 2**16))
def test_nothing_is_held_or_applied_once_an_engage_is_answered(
        tmp_path_factory: Any, injectors: int, batch: bool, delay_ms: int, seed: int) -> None:
    tmp = tmp_path_factory.mktemp("race")
    rng = random.Random(seed)
    with virtual_agents(tmp, nodes=1, gpus=8) as servers:
        server = servers["node-0"]
        answered = threading.Event()
        late: list[str] = []  # faults applied by a request sent after the engage's answer
        stop = threading.Event()

        def inject(worker: int) -> None:
            with AgentClient(server.url, TOKEN) as client:
                while not stop.is_set():
                    gpu = rng.randrange(8)
                    after = answered.is_set()
                    try:
                        if batch:
                            ids = [f["id"] for f in client.inject_many(
                                [{"kind": "gpu.ecc", "target": {"gpu": gpu}, "params": ECC,
                                  "lease_s": 60}])]
                        else:
                            ids = [client.inject("gpu.ecc", {"gpu": gpu}, ECC, 60)["id"]]
                    except AgentHalted:
                        continue
                    except AgentError:  # a conflict with another worker's fault
                        continue
                    if after:
                        late.extend(ids)

        workers = [threading.Thread(target=inject, args=(n,)) for n in range(injectors)]
        for worker in workers:
            worker.start()
        stop.wait(delay_ms / 1000)
        with AgentClient(server.url, TOKEN) as client:
            engaged = client.halt("race")
            answered.set()
            assert engaged["active"] == 0
            assert server.registry.faults() == []
        stop.wait(0.05)
        stop.set()
        for worker in workers:
            worker.join(timeout=10)
        assert late == []
        assert server.registry.faults() == []
