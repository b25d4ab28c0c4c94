"""A real ``gameday run`` (a subprocess) against a real agent (in-process, over real HTTP;
the lab's virtual GPUs stand in for NVML): the safety lever engaged mid-run is seen by
the lease renewer within one renewal, the run rolls back and exits 1 naming the lever;
a new run and ``gameday plan`` refuse (exit 2) while it is engaged."""

import json
import subprocess
import sys
import time
from pathlib import Path

import yaml

from gameday.wire.agent_client import AgentClient
from tests.safety.safety_helpers import REPO, TOKEN, env_for, gameday, virtual_agents

LEASE_S = 3.0  # renewed every lease/3 = 1 s: the run sees the lever at the next renewal


def _experiment(path: Path, marker: Path) -> Path:
    path.write_text(yaml.safe_dump({
        "version": "1.0.0", "title": "an ECC error held for a while",
        "description": "halt test",
        "extensions": [{"name": "gameday", "target": "host", "lease_s": LEASE_S}],
        "method": [{"type": "action", "name": "ecc-then-hold", "provider": {
            "type": "python", "module": "tests.safety.safety_acts", "func": "inject_then_hold",
            "arguments": {"gpu": {"node": "node-0", "index": 0}, "marker": str(marker),
                          "seconds": 60}}}],
    }, sort_keys=False))
    return path


def test_running_run_sees_the_lever_within_one_renewal(tmp_path: Path) -> None:
    marker = tmp_path / "holding"
    experiment = _experiment(tmp_path / "exp.yaml", marker)
    with virtual_agents(tmp_path, nodes=1) as servers:
        server = servers["node-0"]
        env = dict(env_for(tmp_path), GAMEDAY_AGENT_URL=server.url, GAMEDAY_AGENT_TOKEN=TOKEN)
        journal = tmp_path / "journal.json"
        proc = subprocess.Popen(
            [str(Path(sys.executable).parent / "gameday"), "run", str(experiment),
             "--journal-path", str(journal)],
            env=env, cwd=REPO, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 60
            while not marker.exists():
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(proc.communicate(timeout=30)[0])
                time.sleep(0.05)
            assert len(server.registry.faults()) == 1
            with AgentClient(server.url, TOKEN) as client:
                client.halt("on-call: stop everything")
            engaged_at = time.monotonic()
            out, _ = proc.communicate(timeout=30)
            took = time.monotonic() - engaged_at
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        assert proc.returncode == 1, out
        assert "safety lever of node node-0 is engaged" in out and "stop everything" in out
        assert took < 60, (took, out)  # the 60 s hold was cut short, not waited out
        assert server.registry.faults() == []
        document = json.loads(journal.read_text())
        verdict = document["gameday"]["verdict"]
        assert verdict["exit_code"] == 1
        assert any("safety lever" in reason for reason in verdict["reasons"])
        assert [e["event"] for e in document["gameday"]["timeline"]].count("halted") == 1
        # seen by the renewal itself: the fault is recorded as reverted by the rollback,
        # never as a lease lost (which a renewal after the agent's revert would record)
        [fault] = document["gameday"]["faults"]
        assert fault["reverted_at"] is not None and fault["revert_reason"] != "lease-lost", fault

        # while it is engaged: plan and a new run refuse, nothing injected
        planned = gameday(["plan", str(experiment), "--output", "json"], env)
        assert planned.returncode == 2, planned.stdout + planned.stderr
        plan = json.loads(planned.stdout)["plan"]
        assert plan["halted"] and "stop everything" in plan["halted"][0]
        refused = gameday(["run", str(experiment)], env)
        assert refused.returncode == 2, refused.stdout + refused.stderr
        assert "the safety lever is engaged" in refused.stderr
        assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
        assert server.registry.faults() == []
