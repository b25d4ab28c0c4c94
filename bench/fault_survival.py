"""Fault survival: the orchestrator dies (SIGKILL at a random moment), no fault survives it.

One lab for the whole bench. Each trial starts ``gameday run`` of a lab experiment (a
single-bit ECC fault under a short lease, then a 30 s probe) and kills it with
SIGKILL at a uniformly random moment between 0.2 s and ``--window`` s after its
start: during start-up, planning, injection, or while the fault is held and renewed.
From the kill on, the agents are polled every 20 ms until they hold no active fault.

``left_behind`` counts faults still active ``lease + 1`` s after the kill (must be 0);
``max_revert_s`` is the longest time from kill to the last fault gone;
``revert_over_lease`` is that time as a ratio of the lease. Last line::

    fault_survival: trials=N left_behind=K max_revert_s=… faulted_at_kill=F revert_over_lease=…
"""

import argparse
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from gameday.engine.agent_client import AgentClient
from gameday.lab import api as lab

REPO = Path(__file__).resolve().parents[1]
GAMEDAY = str(Path(sys.executable).parent / "gameday")


def _experiment(path: Path, lease_s: float, gpu: tuple[str, int]) -> Path:
    document: dict[str, Any] = {
        "title": "fault survival", "description": "killed at a random moment",
        "extensions": [{"name": "gameday", "target": "lab", "lease_s": lease_s}],
        "method": [
            {"type": "action", "name": "ecc", "provider": {
                "type": "python", "module": "faults.gpu", "func": "ecc_error",
                "arguments": {"gpu": {"node": gpu[0], "index": gpu[1]}, "kind": "single_bit",
                              "count": 1}}},
            {"type": "probe", "name": "hold", "provider": {  # the fault is held, renewed
                "type": "python", "module": "tests.fixtures.acts", "func": "sleep",
                "arguments": {"seconds": 30}}}],
        "rollbacks": [{"type": "action", "name": "revert", "provider": {
            "type": "python", "module": "faults.gpu", "func": "revert"}}],
    }
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def _active(clients: list[AgentClient]) -> int:
    return sum(len(client.faults()) for client in clients)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=50)
    parser.add_argument("--lease", type=float, default=2.0)
    parser.add_argument("--window", type=float, default=5.0,
                        help="kill within this many seconds of the start")
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory(prefix="gdsafe-bench-") as tmp:
        base = Path(tmp)
        lab_dir = base / "lab"
        lab.up(lab_dir)
        try:
            document = yaml.safe_load((lab_dir / "lab.json").read_text())
            token = Path(document["token_file"]).read_text().strip()
            clients = [AgentClient(n["agent_url"], token) for n in document["nodes"]]
            gpus = [(n["name"], i) for n in document["nodes"] for i in range(2)]
            env = dict(os.environ, GAMEDAY_HOME=str(base / "home"),
                       GAMEDAY_JOURNALS=str(base / "journals"), GAMEDAY_LAB_DIR=str(lab_dir),
                       PYTHONPATH=f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
            left_behind, faulted, reverts = 0, 0, []
            for trial in range(args.trials):
                path = _experiment(base / f"trial-{trial}.yaml", args.lease,
                                   gpus[trial % len(gpus)])
                delay = rng.uniform(0.2, args.window)
                proc = subprocess.Popen([GAMEDAY, "run", str(path)], env=env, cwd=REPO,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                time.sleep(delay)
                proc.send_signal(signal.SIGKILL)
                proc.wait()
                killed = time.monotonic()
                active = _active(clients)
                faulted += active > 0
                while active and time.monotonic() - killed <= args.lease + 1:
                    time.sleep(0.02)
                    active = _active(clients)
                gone = time.monotonic() - killed
                if active:
                    left_behind += active
                    print(f"trial {trial}: {active} fault(s) left behind", flush=True)
                    for client in clients:  # leave nothing for the next trial
                        for fault in client.faults():
                            client.revert(fault["id"])
                reverts.append(gone)
                print(f"trial {trial}: killed at {delay:.2f} s, faults gone {gone:.2f} s after",
                      flush=True)
        finally:
            lab.down(lab_dir)
    worst = max(reverts, default=0.0)
    print(f"revert after kill: median {statistics.median(reverts):.2f} s, max {worst:.2f} s "
          f"(lease {args.lease:g} s)")
    print(f"fault_survival: trials={args.trials} left_behind={left_behind} "
          f"max_revert_s={worst:.2f} faulted_at_kill={faulted} "
          f"revert_over_lease={worst / args.lease:.2f}")


if __name__ == "__main__":
    main()
