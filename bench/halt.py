"""The safety lever: time from ``gameday halt`` to every fault reverted, across 128 agents
holding faults on 1,024 GPUs (goal <= 1 s on this machine).

Set-up (not timed), as bench/fanout.py: 128 REAL agent HTTP servers with the lab's
virtual-GPU backend (8 GPUs each), in ``--racks`` subprocesses (default 8) of 16
``AgentServer``s, their state (fsync'd) in /dev/shm (each stands for a machine with a
disk of its own); a target configuration that lists all 128 (``agents:``, one token
file). Each agent is given one fault per GPU (``gpu.ecc``, one batch per agent).

Timed, in ``--rounds`` turns (default 3), each on a freshly faulted fleet:

- ``cli_s``: the command a person runs, ``gameday halt --target-config FILE --output
  json`` as a subprocess, from its start (interpreter and imports included) to its exit;
- ``engage_s``: the same engagement in this process
  (:func:`gameday.safety.halt.throw`), without the interpreter's start.

An agent answers an engage only once every fault it held is reverted (``active: 0``), so
the command's end is the moment the last fault was reverted; after each turn every agent
is asked for its active faults (none), then the lever is released (not timed).

Last line: ``halt: agents=128 gpus=1024 faults=1024 cli_s=… engage_s=… goal_s=1``
(``cli_s`` and ``engage_s`` are means).
"""

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path[:0] = [str(REPO), str(BENCH)]

import fanout  # noqa: E402  (bench/fanout.py: the racks of agents)

ECC = {"kind": "single_bit", "count": 1}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--agents", type=int, default=128)
    parser.add_argument("--gpus", type=int, default=8, help="GPUs per agent")
    parser.add_argument("--racks", type=int, default=8, help="agent processes")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    from gameday.safety.halt import throw
    from gameday.wire.agent_client import AgentClient

    with tempfile.TemporaryDirectory(prefix="gd-halt-bench-") as tmp:
        home = Path(tmp)
        agent_state = Path(tempfile.mkdtemp(prefix="gd-halt-agents-",
                                            dir=fanout.DEFAULT_AGENT_STATE or tmp))
        processes, agents = fanout.start_racks(args, agent_state)
        try:
            token_file = home / "token"
            token_file.write_text(fanout.TOKEN + "\n")
            token_file.chmod(0o600)
            config = home / "target.yaml"
            config.write_text(yaml.safe_dump({"agents": [
                {"node": a["node"], "url": a["url"], "token_file": str(token_file)}
                for a in agents]}))
            clients = [AgentClient(a["url"], fanout.TOKEN, timeout_s=30) for a in agents]
            env = dict(os.environ, PYTHONPATH=str(REPO), GAMEDAY_HOME=str(home / "gd"),
                       GAMEDAY_LAB_DIR=str(home / "no-lab"))
            os.environ.update(GAMEDAY_HOME=env["GAMEDAY_HOME"],
                              GAMEDAY_LAB_DIR=env["GAMEDAY_LAB_DIR"])
            gameday = str(Path(sys.executable).parent / "gameday")
            pool = ThreadPoolExecutor(max_workers=32)

            def fault_everything() -> int:
                def one(client: AgentClient) -> int:
                    return len(client.inject_many([
                        {"kind": "gpu.ecc", "target": {"gpu": gpu}, "params": ECC,
                         "lease_s": 600} for gpu in range(args.gpus)], minimal=True))
                return sum(pool.map(one, clients))

            def held() -> int:
                return sum(pool.map(lambda c: len(c.faults()), clients))

            cli_s, engage_s = [], []
            for _ in range(args.rounds):
                for mode in ("cli", "engage"):
                    faults = fault_everything()
                    assert faults == args.agents * args.gpus, faults
                    started = time.perf_counter()
                    if mode == "cli":
                        done = subprocess.run(
                            [gameday, "halt", "--target-config", str(config), "--reason",
                             "bench", "--output", "json"], env=env, cwd=REPO, text=True,
                            capture_output=True, timeout=120)
                        cli_s.append(time.perf_counter() - started)
                        assert done.returncode == 0, done.stdout[-2000:] + done.stderr
                        document = json.loads(done.stdout)
                    else:
                        document = throw("engage", "bench", config)
                        engage_s.append(time.perf_counter() - started)
                    assert document["exit_code"] == 0, document["lines"][-3:]
                    assert all(a["active"] == 0 for a in document["agents"])
                    assert held() == 0
                    released = throw("release", "", config)
                    assert released["exit_code"] == 0, released["lines"][-3:]
            pool.shutdown()
            for client in clients:
                client.close()
        finally:
            for process in processes:
                process.send_signal(signal.SIGTERM)
            for process in processes:
                process.wait(60)
            shutil.rmtree(agent_state, ignore_errors=True)  # in /dev/shm: outside ``tmp``
    gpus = args.agents * args.gpus
    print(f"gameday halt (subprocess): {', '.join(f'{s:.3f}' for s in cli_s)} s; in "
          f"process: {', '.join(f'{s:.3f}' for s in engage_s)} s (on {os.cpu_count()} CPUs; "
          f"load average {os.getloadavg()[0]:.1f})")
    print(f"halt: agents={args.agents} gpus={gpus} faults={gpus} "
          f"cli_s={statistics.fmean(cli_s):.3f} engage_s={statistics.fmean(engage_s):.3f} "
          "goal_s=1")


if __name__ == "__main__":
    main()
