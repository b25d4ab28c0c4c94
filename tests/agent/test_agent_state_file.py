"""The agent's state file and the directory it keeps open between saves: real files,
real agents (started with HTTP and stopped), a real backend of marker files."""

import contextlib
import gc
import json
import os
import pathlib
import subprocess
import sys

from gameday.agent.registry import FaultRegistry
from gameday.agent.server import AgentServer
from gameday.agent.state import StateFile
from gameday.contract.backend import FaultRequest
from tests.agent.agent_marker import KIND, REPO, MarkerBackend


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


def many_agents_started_and_stopped(root: pathlib.Path) -> None:
    """The scenario, run in a fresh interpreter: what it checks is this process's whole
    descriptor table, which another test's threads would share in the test's worker."""
    backend = MarkerBackend(root / "markers")
    request = FaultRequest(KIND, {"name": "x"})
    for i in range(3):  # warm up: what a first agent opens once per process
        AgentServer(backend, token="t", state_path=root / "warm" / f"{i}.json",
                    node="n").start().stop()
    gc.collect()
    before = open_fds()
    for i in range(20):
        server = AgentServer(backend, token="t", state_path=root / f"a{i}" / "agent.json",
                             node="n").start()
        server.registry.apply(request, 60.0)
        server.stop()
        registry = FaultRegistry(backend, state_path=root / f"r{i}" / "agent.json",
                                 node="n")
        registry.apply(request, 60.0)
        registry.close()  # closes the directory it kept open, without the collector
        assert open_fds() <= before, f"left open: {described(open_fds() - before)}"
    kept = []
    for i in range(5):  # stopped without reverting: closed too, the faults left saved
        server = AgentServer(backend, token="t", state_path=root / f"k{i}" / "agent.json",
                             node="n").start()
        server.registry.apply(FaultRequest(KIND, {"name": f"k{i}"}), 60.0)
        server.stop(revert=False)
        kept.append(server)  # alive: the collector has nothing to do with it
        assert open_fds() <= before, f"left open: {described(open_fds() - before)}"
    assert all(len(s.registry.faults()) == 1 for s in kept)


def described(fds: set[int]) -> list[str]:
    named = []
    for fd in sorted(fds):
        with contextlib.suppress(OSError):  # closed since (the listing's own descriptor)
            named.append(f"{fd} -> {os.readlink(f'/proc/self/fd/{fd}')}")
    return named


def test_many_agents_started_and_stopped_leave_no_descriptor_open(tmp_path: pathlib.Path
                                                                  ) -> None:
    """Real agents in a process of their own (a real interpreter, real threads, real
    sockets): every descriptor an agent or a registry opened is closed when it stops."""
    done = subprocess.run(
        [sys.executable, "-c",
         "import pathlib, sys; from tests.agent.test_agent_state_file import "
         "many_agents_started_and_stopped as run; run(pathlib.Path(sys.argv[1]))",
         str(tmp_path)], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
