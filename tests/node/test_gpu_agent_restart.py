"""A GPU power limit lowered by ``gpu.thermal`` (``allow_device_settings``) outlives no
agent: a real ``gameday agent serve --backend host`` process over the STAND-IN NVML
(tests/node/gpu_standin/libnvml_standin.c, loaded by pynvml through
``LD_LIBRARY_PATH``, its power limits shared between processes through
``$STANDIN_NVML_SHARED`` as a real GPU keeps its limit) lowers an administrator's own
earlier limit, is SIGKILLed, and the agent started again on the same state directory
puts exactly that earlier limit back (not the driver's default). What a real driver
does with the limit is checked by bench/gpu_check.py on a GPU machine."""

import json
import os
import subprocess
import sys
from pathlib import Path

from gameday.wire.agent_client import AgentClient
from tests.agent.agent_marker import REPO, kill, read_url, run_agent

TOKEN = "d3f1c7a9b2e84f60a1c5d7e9b3f2a4c6d8e0f1a3b5c7d9e1f3a5b7c9d1e3f5a7"
ADMIN_LIMIT_MW = 600_000  # an administrator's own limit on GPU 1 (the default: 700,000)
#: What an administrator's ``nvidia-smi -pl`` and a reader do: set (argv[1] given) and
#: print GPU 1's power limit through pynvml.
LIMIT_SCRIPT = ("import sys, pynvml; pynvml.nvmlInit(); "
                "h = pynvml.nvmlDeviceGetHandleByIndex(1); "
                "sys.argv[1:] and pynvml.nvmlDeviceSetPowerManagementLimit(h, int(sys.argv[1])); "
                "print(pynvml.nvmlDeviceGetPowerManagementLimit(h))")


def standin_env(libs: Path, tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("GAMEDAY_AGENT_TOKEN", "CUDA_VISIBLE_DEVICES", "PYTHONPATH")
           and not k.startswith(("STANDIN_", "GAMEDAY_DCGM"))}
    return {**env, "LD_LIBRARY_PATH": str(libs), "PYTHONPATH": str(REPO),
            "STANDIN_NVML_SHARED": str(tmp_path / "nvml-power")}


def power_limit(env: dict[str, str], set_mw: int | None = None) -> int:
    """GPU 1's power limit on the stand-in, read (or first set) in a process of its own."""
    result = subprocess.run([sys.executable, "-c", LIMIT_SCRIPT,
                             *([str(set_mw)] if set_mw is not None else [])],
                            env=env, text=True, capture_output=True, timeout=60, check=True)
    return int(result.stdout)


def start_agent(env: dict[str, str], tmp_path: Path) -> tuple[subprocess.Popen[str], str]:
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps({"kinds": ["gpu.thermal"], "gpu_device_settings": True}))
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")
    token.chmod(0o600)
    agent = run_agent(["--backend", "host", "--listen", "127.0.0.1:0", "--token-file",
                       str(token), "--state-dir", str(tmp_path / "state"), "--node",
                       "gpu-host", "--policy", str(policy)], env, tmp_path / "agent.stderr")
    try:
        return agent, read_url(agent, timeout_s=60)
    except BaseException:
        kill(agent)
        raise


def test_a_lowered_power_limit_is_put_back_by_the_agent_started_after_a_sigkill(
        standin_libs: Path, tmp_path: Path) -> None:
    env = standin_env(standin_libs, tmp_path)
    assert power_limit(env, ADMIN_LIMIT_MW) == ADMIN_LIMIT_MW
    agent, url = start_agent(env, tmp_path)
    try:
        with AgentClient(url, TOKEN) as client:
            assert client.inventory()["gpus"][1]["name"] == "Stand-in H100 1"
            fault = client.inject("gpu.thermal", {"gpu": 1},
                                  {"clock_ratio": 0.5, "allow_device_settings": True},
                                  lease_s=300)
        assert fault["injected_at"] == "device-settings"
        assert fault["details"]["previous_power_limit_mw"] == ADMIN_LIMIT_MW
        assert power_limit(env) == ADMIN_LIMIT_MW // 2
    finally:
        kill(agent)  # SIGKILL: the agent reverts nothing
    assert agent.returncode == -9
    assert power_limit(env) == ADMIN_LIMIT_MW // 2  # the GPU keeps what was set
    saved = json.loads((tmp_path / "state" / "gpu-settings-gpu-host.json").read_text())
    assert saved["settings"][fault["id"]]["previous"] == ADMIN_LIMIT_MW
    again, url = start_agent(env, tmp_path)
    try:
        assert power_limit(env) == ADMIN_LIMIT_MW  # the earlier limit, not 700,000
        with AgentClient(url, TOKEN) as client:
            [reverted] = client.faults(include_reverted=True)
        assert reverted["id"] == fault["id"]
        assert reverted["revert_reason"] == "agent-restart"
        assert json.loads((tmp_path / "state" / "gpu-settings-gpu-host.json").read_text()
                          ) == {"version": 1, "settings": {}}
    finally:
        kill(again)
    assert power_limit(env) == ADMIN_LIMIT_MW  # a restart with nothing saved sets nothing

