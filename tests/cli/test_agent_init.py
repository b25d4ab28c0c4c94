"""``gameday agent init DIR``: what it writes is what a real agent serves, over mutual TLS,
and a real run through it pauses a real process and puts it back.

The end-to-end test is the user's path from docs/host.md: init, the printed ``agent
serve`` command started as it is printed, the printed orchestrator settings, ``gameday
run --target host``. The other tests check what is written (modes, the policy the agent
loads, the unit's command line) and what is refused (nothing written)."""

import json
import os
import shlex
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from gameday.agent.policy import load_policy
from gameday.agent.serve import serve_parser
from gameday.cli.agentinit import AgentSetup, main, policy_text, write_setup
from gameday.cli.main import main as gameday_main
from tests.conftest import REPO, cli_env, gameday, write_experiment


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def _init(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, object]:
    assert main([*argv, "--output", "json"]) == 0
    document: dict[str, object] = json.loads(capsys.readouterr().out)
    return document


def test_the_printed_commands_serve_a_real_agent_over_mutual_tls_and_a_run_pauses_a_process(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    marker = f"{31000 + os.getpid() % 1000}.5"
    victim = subprocess.Popen(["sleep", marker])
    port = _free_port()
    document = _init(capsys, str(tmp_path / "agent"), "--allow-process", f"^sleep {marker}$",
                     "--listen", f"127.0.0.1:{port}", "--node", "my-host", "--tls")
    serve = document["serve"]
    assert isinstance(serve, list)
    env = cli_env(tmp_path)
    with open(tmp_path / "agent.stderr", "w") as log:
        agent = subprocess.Popen(serve, env=env, stdout=subprocess.PIPE, stderr=log, text=True)
    try:
        assert agent.stdout is not None
        line = agent.stdout.readline()
        assert line.startswith("agent listening on https://127.0.0.1:"), (
            line, (tmp_path / "agent.stderr").read_text()[-2000:])
        settings_ = document["orchestrator"]
        assert isinstance(settings_, dict)
        files = document["files"]
        assert isinstance(files, dict)
        run_env = {**env, **{k: v for k, v in settings_.items() if not v.startswith("$(")},
                   "GAMEDAY_AGENT_TOKEN": Path(files["token"]).read_text().strip()}
        experiment = write_experiment(tmp_path / "pause.yaml", {
            "version": "1.0.0", "title": "a paused process is continued",
            "description": "through the agent gameday agent init set up",
            "extensions": [{"name": "gameday", "target": "host",
                            "coverage": {"fault": "process.pause", "layer": "service"}}],
            "method": [{"type": "action", "name": "pause-it",
                        "provider": {"type": "python", "module": "faults.process",
                                     "func": "pause",
                                     "arguments": {"process": {"cmdline": f"^sleep {marker}$"},
                                                   "duration_s": 3}}},
                       {"type": "probe", "name": "it-is-stopped",
                        "provider": {"type": "python", "module": "tests.fixtures.acts",
                                     "func": "process_state",
                                     "arguments": {"pid": victim.pid, "expected": "T"}}}],
            "rollbacks": [{"type": "action", "name": "revert",
                           "provider": {"type": "python", "module": "faults.process",
                                        "func": "revert"}}]})
        run = subprocess.Popen([str(Path(sys.executable).parent / "gameday"), "run",
                                str(experiment)], env=run_env, cwd=REPO, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        out, err = run.communicate(timeout=120)
        assert run.returncode == 0, out + err  # the probe saw it stopped (state T)
        assert _state(victim.pid) in ("S", "R")
    finally:
        agent.terminate()
        agent.wait(timeout=30)
        victim.kill()
        victim.wait()


def test_what_is_written_has_safe_modes_and_a_policy_the_agent_loads(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    directory = tmp_path / "agent"
    document = _init(capsys, str(directory), "--allow-process", "mlserver start",
                     "--allow-path", str(tmp_path / "models"), "--allow-link", "veth-gd",
                     "--tls", "--systemd", "--server-name", "gpu-7.example")
    token = directory / "token"
    assert stat.S_IMODE(token.stat().st_mode) == 0o600
    assert len(bytes.fromhex(token.read_text().strip())) == 32  # 256 bits
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    for key in ("agent.key", "client.key"):
        assert stat.S_IMODE((directory / "tls" / key).stat().st_mode) == 0o600
    policy = load_policy(directory / "policy.yml")
    assert policy.kinds == {"process.kill", "process.pause", "storage.stall",
                            "storage.errors", "storage.slow", "net.link_flap", "net.loss",
                            "net.partition", "net.latency"}
    assert policy.process_cmdline == ("mlserver start",)
    assert policy.interfaces == {"veth-gd"}
    assert gameday_main(["agent", "policy", "--check", str(directory / "policy.yml")]) == 0
    check = document["check"]
    assert isinstance(check, list) and "--state-dir" in check and "--tls-client-ca" in check
    assert gameday_main(check[1:]) == 0  # as printed: with the files the agent serves with
    unit = (directory / "gameday-agent.service").read_text()
    exec_start = next(line for line in unit.splitlines() if line.startswith("ExecStart="))
    argv = shlex.split(exec_start.removeprefix("ExecStart="))
    assert argv[1:3] == ["agent", "serve"] and argv == document["serve"]
    served = serve_parser().parse_args(argv[3:])
    assert (served.policy, served.token_file) == (str(directory / "policy.yml"), str(token))
    assert served.tls_client_ca == str(directory / "tls" / "ca.crt")


@pytest.mark.parametrize(("argv", "says"), [
    (["--allow-process", "x", "--kinds", "gpu.nope"], "no fault kind 'gpu.nope'"),
    ([], "nothing to allow"),
    (["--allow-process", "x", "--listen", "0.0.0.0:9410"], "add --tls"),
    (["--allow-path", "relative/dir"], "must be an absolute path"),
    (["--allow-process", "(unclosed"], "--allow-process '(unclosed'"),
    (["--allow-path", "/"], "never faults"),
])
def test_bad_requests_are_one_line_exit_2_and_write_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], says: str) -> None:
    directory = tmp_path / "agent"
    assert main([str(directory), *argv]) == 2
    err = capsys.readouterr().err
    assert says in err and err.count("\n") == 1, err
    assert not directory.exists()


def test_a_path_over_the_setup_itself_is_refused(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """The setup directory holds the token, state and keys: a storage fault over it would
    cut the agent's own lifelines."""
    assert main([str(tmp_path / "agent"), "--allow-path", str(tmp_path)]) == 2
    assert "never faults" in capsys.readouterr().err
    assert not (tmp_path / "agent").exists()


def test_an_existing_setup_is_kept_unless_forced(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    directory = tmp_path / "agent"
    _init(capsys, str(directory), "--allow-process-name", "trainer")
    token = (directory / "token").read_text()
    assert main([str(directory), "--allow-process-name", "trainer"]) == 2
    assert "--force" in capsys.readouterr().err
    assert (directory / "token").read_text() == token
    _init(capsys, str(directory), "--allow-process-name", "trainer", "--force")
    assert (directory / "token").read_text() != token


def test_the_text_output_names_the_serve_command_and_the_settings(
        tmp_path: Path) -> None:
    result = gameday(["agent", "init", str(tmp_path / "agent"), "--allow-process-name",
                      "trainer"], cli_env(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "agent serve --backend host --listen 127.0.0.1:9410" in result.stdout
    assert f"export GAMEDAY_AGENT_TOKEN=$(cat {tmp_path / 'agent' / 'token'})" in result.stdout
    assert "export GAMEDAY_AGENT_URL=http://127.0.0.1:9410" in result.stdout


_names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")),
                 min_size=1, max_size=24).filter(lambda s: s.strip() == s and s)


@settings(max_examples=60, deadline=None)
@given(names=st.lists(_names, max_size=3), links=st.lists(_names, max_size=3),
       kinds=st.lists(st.sampled_from(["process.kill", "gpu.oom", "net.loss",
                                       "storage.stall"]), max_size=3))
def test_any_names_round_trip_through_the_policy_the_agent_loads(
        tmp_path_factory: pytest.TempPathFactory, names: list[str], links: list[str],
        kinds: list[str]) -> None:
    """Whatever characters a name holds (quotes, colons, '#', YAML indicators, any
    script), the written policy is valid YAML the agent loads to exactly what was asked."""
    directory = tmp_path_factory.mktemp("init")
    setup = AgentSetup(directory=directory / "agent", process_names=tuple(names),
                       links=tuple(links), kinds=tuple(kinds) or ("process.pause",))
    loaded = yaml.safe_load(policy_text(setup))
    assert loaded["processes"]["names"] == names
    assert loaded["interfaces"] == links
    write_setup(setup)
    policy = load_policy(setup.directory / "policy.yml")
    assert policy.process_names == set(names) and policy.interfaces == set(links)
    assert policy.kinds == set(setup.allowed_kinds())
