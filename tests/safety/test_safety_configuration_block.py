"""The experiment's ``configuration:`` and ``secrets:`` configure the host target, as a
Chaos Toolkit user expects: a real ``gameday run`` against a real agent (the lab's
virtual GPU backend, the stand-in for NVML), with no GAMEDAY_AGENT_* in its environment."""

import json
from pathlib import Path
from typing import Any

import yaml

from tests.safety.safety_helpers import TOKEN, env_for, gameday, virtual_agents


def _experiment(path: Path, **blocks: Any) -> Path:
    path.write_text(yaml.safe_dump({
        "version": "1.0.0", "title": "configured", "description": "configuration block",
        **blocks,
        "extensions": [{"name": "gameday", "target": "host", "lease_s": 30}],
        "method": [{"type": "action", "name": "ecc", "provider": {
            "type": "python", "module": "faults.gpu", "func": "ecc_error",
            "arguments": {"gpu": {"node": "node-0", "index": 0}, "kind": "single_bit",
                          "count": 1}}}]}, sort_keys=False))
    return path


def _env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in env_for(tmp).items() if not k.startswith("GAMEDAY_AGENT_")}
    env["MY_AGENT_TOKEN"] = TOKEN
    return env


def test_configuration_and_secrets_set_the_agent(tmp_path: Path) -> None:
    with virtual_agents(tmp_path, nodes=1) as servers:
        url = servers["node-0"].url
        variants = {
            "configuration": {"configuration": {
                "agent_url": url, "agent_token": {"type": "env", "key": "MY_AGENT_TOKEN"}}},
            "secrets": {"configuration": {"agent_url": url},
                        "secrets": {"agent": {"agent_token": {"type": "env",
                                                              "key": "MY_AGENT_TOKEN"}}}},
        }
        for name, blocks in variants.items():
            path = _experiment(tmp_path / f"{name}.yaml", **blocks)
            journal = tmp_path / f"{name}.json"
            done = gameday(["run", str(path), "--journal-path", str(journal)], _env(tmp_path))
            assert done.returncode == 0, name + done.stdout + done.stderr
            document = json.loads(journal.read_text())
            assert document["gameday"]["target_source"] == url
            [fault] = document["gameday"]["faults"]
            assert fault["agent_url"] == url and fault["reverted_at"] is not None
            assert TOKEN not in journal.read_text()


def test_the_error_names_every_place_a_setting_may_come_from(tmp_path: Path) -> None:
    done = gameday(["run", str(_experiment(tmp_path / "none.yaml"))], _env(tmp_path))
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.strip() == (
        "gameday: target host needs agent_url and agent_token: set each with --var "
        "KEY=VALUE, in the experiment's configuration (a value or {type: env, key: NAME}), "
        "in its secrets (any scope), or in the environment as GAMEDAY_AGENT_URL / "
        "GAMEDAY_AGENT_TOKEN")
    unset = _experiment(tmp_path / "unset.yaml", configuration={
        "agent_url": "http://127.0.0.1:9", "agent_token": {"type": "env", "key": "NO_SUCH"}})
    done = gameday(["run", str(unset)], _env(tmp_path))
    assert done.returncode == 2 and "NO_SUCH" in done.stderr, done.stderr
