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

``--mode in-flight`` kills the orchestrator between sending its fault request and
reading the answer, deterministically: the agent (a real one, in this process, on the
lab's virtual GPU backend) answers late. Even trials hold the request inside the
agent's backend and release it after the kill (the agent applies a batch nobody will
read); odd trials hold it in a TCP proxy in front of the agent and release it after
``gameday cleanup`` (the request arrives after it was resolved). The lease is 300 s,
so no lease expiry can hide a leftover: ``left_behind`` counts the faults the agent
holds once ``gameday cleanup`` has run and every held request was released (must be
0); ``resolved`` counts the intents cleanup resolved (reverted / never applied).
Last line::

    fault_survival: mode=in-flight trials=N left_behind=K reverted=R never_applied=M
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
from late_agent import HOLD, HoldingProxy, LateBackend, experiment

from gameday.agent.server import AgentServer
from gameday.lab import api as lab
from gameday.wire.agent_client import AgentClient

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
            HOLD],  # the fault is held, renewed
        "rollbacks": [{"type": "action", "name": "revert", "provider": {
            "type": "python", "module": "faults.gpu", "func": "revert"}}],
    }
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def _active(clients: list[AgentClient]) -> int:
    return sum(len(client.faults()) for client in clients)


def _in_flight_trial(base: Path, trial: int, env: dict[str, str]) -> tuple[int, str]:
    """One in-flight trial: (faults left behind, cleanup's summary line)."""
    token = "gdbench-token-0123456789abcdef"
    backend = LateBackend("node-0", base / f"t{trial}-state", gpus=2, hold_s=120)
    server = AgentServer(backend, token=token, node="node-0",
                         state_path=base / f"t{trial}-agent.json").start()
    proxy = None
    try:
        url, arrived = server.url, backend.arrived
        if trial % 2:
            backend.release.set()
            proxy = HoldingProxy(("127.0.0.1", int(server.url.rsplit(":", 1)[1])))
            url, arrived = proxy.url, proxy.arrived
        run_env = dict(env, GAMEDAY_AGENT_URL=url, GAMEDAY_AGENT_TOKEN=token)
        path = experiment(base / f"t{trial}.yaml", gpu={"node": "node-0"}, lease_s=300)
        proc = subprocess.Popen([GAMEDAY, "run", str(path)], env=run_env, cwd=REPO,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if not arrived.wait(60):
            raise SystemExit(f"trial {trial}: the request never arrived")
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        backend.release.set()  # the agent applies what nobody will read (even trials)
        deadline = time.monotonic() + 10
        while trial % 2 == 0 and len(server.registry.faults()) < 2:
            if time.monotonic() > deadline:
                raise SystemExit(f"trial {trial}: the late apply never finished")
            time.sleep(0.01)
        done = subprocess.run([GAMEDAY, "cleanup"], env=run_env, cwd=REPO, text=True,
                              capture_output=True, timeout=120)
        if proxy is not None:
            proxy.release.set()  # the request arrives after it was resolved
            time.sleep(0.2)
        left = len(server.registry.faults())
        summary = (done.stdout.strip().splitlines() or ["(no output)"])[-1]
        return left, summary
    finally:
        if proxy is not None:
            proxy.close()
        backend.release.set()
        server.stop()


def in_flight(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="gdsafe-bench-") as tmp:
        base = Path(tmp)
        env = dict(os.environ, GAMEDAY_HOME=str(base / "home"),
                   GAMEDAY_JOURNALS=str(base / "journals"),
                   PYTHONPATH=f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
        left_behind, reverted, never = 0, 0, 0
        for trial in range(args.trials):
            left, summary = _in_flight_trial(base, trial, env)
            left_behind += left
            words = summary.replace(",", "").split()
            counts = {words[i + 1]: int(words[i]) for i in range(len(words) - 1)
                      if words[i].isdigit()}
            reverted += counts.get("reverted", 0)
            never += counts.get("never", 0)
            print(f"trial {trial} ({'proxy' if trial % 2 else 'backend'}): left {left}; "
                  f"{summary}", flush=True)
    print(f"fault_survival: mode=in-flight trials={args.trials} left_behind={left_behind} "
          f"reverted={reverted} never_applied={never}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=50)
    parser.add_argument("--lease", type=float, default=2.0)
    parser.add_argument("--window", type=float, default=5.0,
                        help="kill within this many seconds of the start")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--mode", choices=["random", "in-flight"], default="random",
                        help="random: kill at a random moment; in-flight: kill between "
                             "request and answer, then gameday cleanup")
    args = parser.parse_args()
    if args.mode == "in-flight":
        in_flight(args)
        return
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
