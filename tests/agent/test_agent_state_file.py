"""The agent's state file and the directory it keeps open between saves: real files,
real agents (started with HTTP and stopped), a real backend of marker files."""

import gc
import json
import os
import pathlib

from gameday.agent.registry import FaultRegistry
from gameday.agent.server import AgentServer
from gameday.agent.state import StateFile
from gameday.contract.backend import FaultRequest
from tests.agent.agent_marker import KIND, MarkerBackend


def open_fds() -> set[int]:
    return {int(name) for name in os.listdir("/proc/self/fd")}


def test_a_save_writes_what_the_encoder_writes_for_whichever_node(tmp_path: pathlib.Path
                                                                   ) -> None:
    state = StateFile(tmp_path / "agent.json")
    state.save([{"id": "f-1"}], node="n\u00e9-1", saved_at=12.5)
    state.save([{"id": "f-1"}, {"id": "f-2"}], node='n"2', saved_at=13.0)
    text = state.path.read_text()
    assert text == json.dumps({"version": 1, "node": 'n"2', "saved_at": 13.0,
                               "faults": [{"id": "f-1"}, {"id": "f-2"}]},
                              separators=(",", ":"))
    state.close()


def test_many_agents_started_and_stopped_leave_no_descriptor_open(tmp_path: pathlib.Path
                                                                  ) -> None:
    backend = MarkerBackend(tmp_path / "markers")
    request = FaultRequest(KIND, {"name": "x"})
    for i in range(3):  # warm up: what a first agent opens once per process
        AgentServer(backend, token="t", state_path=tmp_path / "warm" / f"{i}.json",
                    node="n").start().stop()
    gc.collect()
    before = open_fds()
    for i in range(20):
        server = AgentServer(backend, token="t", state_path=tmp_path / f"a{i}" / "agent.json",
                             node="n").start()
        server.registry.apply(request, 60.0)
        server.stop()
        registry = FaultRegistry(backend, state_path=tmp_path / f"r{i}" / "agent.json",
                                 node="n")
        registry.apply(request, 60.0)
        registry.close()  # closes the directory it kept open, without the collector
        assert open_fds() <= before  # (another test's thread may close one)
    kept = []
    for i in range(5):  # stopped without reverting: closed too, the faults left saved
        server = AgentServer(backend, token="t", state_path=tmp_path / f"k{i}" / "agent.json",
                             node="n").start()
        server.registry.apply(FaultRequest(KIND, {"name": f"k{i}"}), 60.0)
        server.stop(revert=False)
        kept.append(server)  # alive: the collector has nothing to do with it
        assert open_fds() <= before
    assert all(len(s.registry.faults()) == 1 for s in kept)
