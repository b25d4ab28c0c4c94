"""The agent as a real process (``python -m gameday.agent.serve`` with the marker backend):
kill -9 and restart, SIGTERM, and the CLI's one-line errors."""

import contextlib
import json
import pathlib
import random
import resource
import signal
import subprocess
import sys
import threading
import time

import pytest

from gameday.agent.serve import load_backend, parse_listen
from gameday.errors import AgentError, InvalidInput
from gameday.wire.agent_client import AgentClient
from tests.agent.agent_marker import (
    KIND,
    REPO,
    STRONG_TOKEN,
    agent_env,
    kill,
    marker_agent_args,
    marker_dirs,
    marker_names,
    read_url,
    run_agent,
)

TOKEN = STRONG_TOKEN


@pytest.fixture
def dirs(tmp_path: pathlib.Path) -> dict[str, pathlib.Path]:
    return marker_dirs(tmp_path)


def agent_args(dirs: dict[str, pathlib.Path]) -> list[str]:
    return marker_agent_args(dirs, "proc-node")


markers = marker_names


def test_kill_9_then_restart_reverts_the_leftover(dirs: dict[str, pathlib.Path]) -> None:
    env = agent_env(dirs["markers"])
    first = run_agent(agent_args(dirs), env, dirs["stderr"])
    try:
        with AgentClient(read_url(first), TOKEN) as client:
            fault = client.inject(KIND, {"gpu": 0}, {}, 3600)
        assert markers(dirs) == {fault["id"]}
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=10)
    finally:
        kill(first)
    assert markers(dirs) == {fault["id"]}  # nobody reverted it
    state_file = dirs["state"] / "agent-proc-node.json"
    assert [f["id"] for f in json.loads(state_file.read_text())["faults"]] == [fault["id"]]

    second = run_agent(agent_args(dirs), env, dirs["stderr"])
    try:
        url = read_url(second)
        assert markers(dirs) == set()  # reverted before the agent said it was listening
        with AgentClient(url, TOKEN) as client:
            assert client.faults() == []
            (done,) = client.faults(include_reverted=True)
        assert done["id"] == fault["id"] and done["revert_reason"] == "agent-restart"
        assert done["reverted_at"] >= fault["applied_at"]
        assert json.loads(state_file.read_text())["faults"] == []
    finally:
        second.terminate()
        kill(second)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_signal_reverts_everything_and_exits_0(dirs: dict[str, pathlib.Path],
                                               signum: signal.Signals) -> None:
    proc = run_agent(agent_args(dirs), agent_env(dirs["markers"]), dirs["stderr"])
    try:
        with AgentClient(read_url(proc), TOKEN) as client:
            ids = {client.inject(KIND, {"gpu": i}, {}, 3600)["id"] for i in range(3)}
        assert markers(dirs) == ids
        proc.send_signal(signum)
        assert proc.wait(timeout=10) == 0
    finally:
        kill(proc)
    assert markers(dirs) == set()
    state = json.loads((dirs["state"] / "agent-proc-node.json").read_text())
    assert state["faults"] == []
    logged = [json.loads(line) for line in dirs["stderr"].read_text().splitlines()
              if line.startswith("{")]
    reasons = [e["reason"] for e in logged if e["event"] == "fault.reverted"]
    assert reasons == ["agent-shutdown"] * 3
    assert TOKEN not in dirs["stderr"].read_text()


def test_token_from_environment(dirs: dict[str, pathlib.Path]) -> None:
    args = [a for a in agent_args(dirs) if a not in ("--token-file", str(dirs["token"]))]
    proc = run_agent(args, agent_env(dirs["markers"], token=TOKEN), dirs["stderr"])
    try:
        with AgentClient(read_url(proc), TOKEN) as client:
            assert client.faults() == []
    finally:
        proc.terminate()
        kill(proc)


@pytest.mark.parametrize(("args", "message"), [
    (["--backend", "tests.agent.agent_marker:factory"],
     "no agent token: pass --token-file F or set"),
    (["--token-file", "/nonexistent/token"], "--token-file /nonexistent/token: cannot read"),
    (["--token-file", "TOKEN", "--backend", "nomodule_xyz:f"], "cannot import nomodule_xyz"),
    (["--token-file", "TOKEN", "--backend", "tests.agent.agent_marker:nothing"],
     "tests.agent.agent_marker has no"),
    (["--token-file", "TOKEN", "--backend", "bogus"], "neither one of host, virtual"),
    (["--token-file", "TOKEN", "--backend", "tests.agent.agent_marker:KIND"], "is not callable"),
    (["--token-file", "TOKEN", "--backend", "tests.agent.agent_marker:factory", "--listen", "nope"],
     "must be HOST:PORT"),
])
def test_cli_errors_are_one_line_exit_2(dirs: dict[str, pathlib.Path], args: list[str],
                                        message: str) -> None:
    args = [str(dirs["token"]) if a == "TOKEN" else a for a in args]
    env = agent_env(dirs["markers"])
    result = subprocess.run([sys.executable, "-m", "gameday.agent.serve", *args,
                             "--state-dir", str(dirs["state"])],
                            cwd=REPO, env=env, capture_output=True, text=True, timeout=30)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], result.stderr
    assert result.stdout == ""


def no_file_bytes() -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))


def test_a_state_file_it_cannot_write_stops_the_agent_at_start(
        dirs: dict[str, pathlib.Path]) -> None:
    """The agent writes its state file before it listens: a state file it cannot write
    is one line and exit 2 at start, not a 500 at the first fault. Real: the agent
    process, whose file size limit is 0 (writing a byte fails with EFBIG, as a full disk
    fails with ENOSPC; root writes any directory, so permissions cannot show it here)."""
    result = subprocess.run([sys.executable, "-m", "gameday.agent.serve", *agent_args(dirs)],
                            cwd=REPO, env=agent_env(dirs["markers"]), capture_output=True,
                            text=True, timeout=30, preexec_fn=no_file_bytes)
    assert result.returncode == 2 and result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot save agent state" in lines[0], result.stderr
    assert str(dirs["state"]) in lines[0] and "File too large" in lines[0]


def test_an_agent_writes_its_empty_state_at_start(dirs: dict[str, pathlib.Path]) -> None:
    proc = run_agent(agent_args(dirs), agent_env(dirs["markers"]), dirs["stderr"])
    try:
        read_url(proc)
        state = json.loads((dirs["state"] / "agent-proc-node.json").read_text())
        assert state["faults"] == [] and state["node"] == "proc-node"
    finally:
        kill(proc)


def test_parse_listen() -> None:
    assert parse_listen("127.0.0.1:7777") == ("127.0.0.1", 7777)
    assert parse_listen("[::1]:0") == ("::1", 0)
    assert parse_listen(":80") == ("0.0.0.0", 80)
    for bad in ("7777", "host:", "host:99999", "host:x"):
        with pytest.raises(InvalidInput):
            parse_listen(bad)


def test_backend_names_resolve_to_specs(monkeypatch: pytest.MonkeyPatch) -> None:
    """``virtual`` names gameday.lab.devices:virtual_backend (imported only when chosen);
    a factory that returns something without the Backend members is refused."""
    from gameday.agent import serve

    assert serve.BACKENDS["virtual"] == "gameday.lab.devices:virtual_backend"
    monkeypatch.setitem(serve.BACKENDS, "dict", "builtins:dict")
    with pytest.raises(InvalidInput, match="returned dict, not a backend"):
        load_backend("dict", "n")


@pytest.mark.parametrize("trial", range(8))
def test_kill_9_at_any_moment_of_a_batch_leaves_nothing_after_restart(
        dirs: dict[str, pathlib.Path], trial: int) -> None:
    """Whenever the agent is killed during or after a batch inject, a restart leaves no
    fault applied. The kill's moment is drawn (seeded by trial) from 0 to 12 ms after the
    batch is sent (this machine applies a batch of 8 in a few), or (trial 0) is the
    instant its answer arrives; the trials kill before anything is saved, in the middle
    of the apply, after it but before the batch's ``active`` state record (which the
    answer does not wait for), and after that. Checked on the markers themselves (the
    files the backend makes) and on the state file."""
    env = agent_env(dirs["markers"])
    batch = [{"kind": KIND, "target": {"gpu": gpu}, "params": {}, "lease_s": 3600}
             for gpu in range(8)]
    first = run_agent(agent_args(dirs), env, dirs["stderr"])
    try:
        url = read_url(first)
        if trial == 0:
            with AgentClient(url, TOKEN) as client:
                client.inject_many(batch)
            first.send_signal(signal.SIGKILL)
        else:
            sender = threading.Thread(target=_inject_quietly, args=(url, batch), daemon=True)
            sender.start()
            time.sleep(random.Random(trial).uniform(0.0, 0.012))
            first.send_signal(signal.SIGKILL)
            sender.join(timeout=10)
        first.wait(timeout=10)
    finally:
        kill(first)
    second = run_agent(agent_args(dirs), env, dirs["stderr"])
    try:
        url = read_url(second)
        assert markers(dirs) == set()  # reverted before the agent listened
        state = json.loads((dirs["state"] / "agent-proc-node.json").read_text())
        assert state["faults"] == []
        with AgentClient(url, TOKEN) as client:
            assert client.faults() == []
    finally:
        second.terminate()
        kill(second)


def _inject_quietly(url: str, batch: list[dict[str, object]]) -> None:
    """Send ``batch``; the agent may be killed before it answers."""
    with contextlib.suppress(AgentError, OSError), AgentClient(url, TOKEN,
                                                               timeout_s=5) as client:
        client.inject_many(batch)
