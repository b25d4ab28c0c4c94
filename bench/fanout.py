"""Fan-out: inject + revert one fault on 1,024 virtual GPUs across 128 agents, against the
same targets done one by one as plain Chaos Toolkit activities.

Set-up (not timed): the Kubernetes API stand-in (gameday/testing/kube.py, real HTTP,
in this process) lists 128 GPU nodes and their agent pods; the 128 agents are REAL agent
HTTP servers with the lab's virtual-GPU backend (8 GPUs each), run as SUBPROCESSES:
``--racks`` processes (default 8) of 16 in-process ``AgentServer``s each, so that the
agents' CPU is not the orchestrator's and 128 interpreters are not started on a shared
machine; they log at WARNING. The agents are dealt out to the racks (node ``i`` in rack
``i % 8``): the agents of one rack share one interpreter lock, which no two agents of a
real fleet do, so neighbouring nodes (which a fan-out sends to one after the other) are
not put behind the same lock. Agents save their state with fsync, as real agents do, by
default in /dev/shm: each stands for a separate machine with its own disk, and 128 of
them fsyncing on this machine's one (shared) disk would measure that disk, not the
fan-out (``--agent-state DIR`` puts them on a disk). The orchestrator discovers the fleet
through the REAL kubernetes client (``--target kubernetes``); its ledger and target locks
are on disk (fsync'd), in both timed parts.

The activities are validated first, as ``gameday run`` validates an experiment before its
method (chaoslib imports their module then).

Timed, in one run, in ``--rounds`` turns (default 3):

- fan-out: the action ``faults.gpu.ecc_error(gpu={percent: 100})`` (one activity:
  1,024 GPUs, concurrently through :class:`gameday.engine.injector.FaultInjector`: one batch request
  per agent, ``POST /v1/faults:batch``), then ``faults.gpu.revert`` (one ``:batch-revert``
  per agent);
- sequential: for a third of the GPUs, ``faults.gpu.ecc_error(gpu={node, index})`` then
  ``faults.gpu.revert`` as plain activities through chaoslib's ``run_activity``.

Each turn is a run of its own (a session), and all of them share one home, as the runs on
one machine share ``$GAMEDAY_HOME``: one ledger file, one set of 64 target lock files
(created by the first fan-out, in its time). ``wall_s`` is the MEAN of the
fan-outs, ``sequential_s`` the SUM of the thirds (every GPU once): taking turns puts the
two under the same conditions on a shared machine, whose speed drifts by tens of per
cent from one minute to the next.

Last line: ``fanout: gpus=1024 agents=128 wall_s=… sequential_s=… ratio=…
orchestrator_rss_mb=…`` (goals: wall_s <= 2, ratio >= 20). ``orchestrator_rss_mb`` is
this process's peak RSS, which also holds the API stand-in.
"""

import argparse
import json
import logging
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import structlog  # noqa: E402

# as `gameday agent serve` configures it (gameday/agent/serve.py), at WARNING
structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
                    cache_logger_on_first_use=True)

TOKEN = "bench-fanout-token"
DEFAULT_AGENT_STATE = "/dev/shm" if Path("/dev/shm").is_dir() else None
NAMESPACE = "gameday-system"
ECC = {"kind": "single_bit", "count": 1}


def deployed_setup(directory: Path) -> Path:
    """What ``gameday agent init --tls --kinds gpu.ecc`` writes: a 256-bit token, a
    default-deny policy, a CA, the agents' certificate (for the Service name the
    orchestrator checks) and the orchestrator's client certificate."""
    from gameday.cli.agentinit import AgentSetup, write_setup
    from gameday.targets.kubernetes.discovery import agent_server_name

    write_setup(AgentSetup(directory, node="fleet", kinds=("gpu.ecc",), tls=True,
                           server_names=(agent_server_name(NAMESPACE),)))
    return directory


def _deployed(setup: Path, node: str, state: Path) -> dict[str, Any]:
    """An agent's arguments as ``gameday agent serve`` gives them with ``setup``'s files:
    mutual TLS, the token file (strength checked), the audit trail (a durable record
    before each change) and the policy's limits."""
    from gameday.agent.audit import AuditTrail
    from gameday.agent.policy import load_policy
    from gameday.wire.tls import ServerTLS
    from gameday.wire.tokens import TokenSet

    tls = setup / "tls"
    return {"token": TokenSet(path=setup / "token"),
            "tls": ServerTLS(tls / "agent.crt", tls / "agent.key", tls / "ca.crt"),
            "audit": AuditTrail(state / "agents" / node / f"audit-{node}.jsonl"),
            "limits": load_policy(setup / "policy.yml").limits()}


def rack(first: int, step: int, agents: int, gpus: int, *, state: Path,
         setup: Path | None = None) -> None:
    """A subprocess holding agents ``first``, ``first + step``, ... (of ``agents``); prints
    their URLs, serves until SIGTERM. With ``setup``: as deployed (:func:`_deployed`)."""
    from gameday.agent.server import AgentServer
    from gameday.lab.devices import VirtualGpuBackend

    servers = []
    for number in range(first, agents, step):
        node = f"gpu-node-{number:03d}"
        security = {"token": TOKEN} if setup is None else _deployed(setup, node, state)
        servers.append(AgentServer(VirtualGpuBackend(node, state / "gpus" / node, gpus=gpus),
                                   state_path=state / "agents" / node / "agent.json",
                                   node=node, reap_interval_s=1.0, **security).start())
    print(json.dumps([{"node": s.node, "url": s.url} for s in servers]), flush=True)
    wait_for_term()
    for server in servers:
        server.stop(revert=True)


def wait_for_term() -> None:
    """Return once this process is sent SIGTERM."""
    stop = False

    def on_term(signum: int, frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    while not stop:
        time.sleep(0.2)


def cpu_seconds(processes: list[subprocess.Popen[str]]) -> float:
    """User + system CPU the agent processes used so far (from /proc)."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for process in processes:
        fields = Path(f"/proc/{process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / ticks


def start_racks(args: argparse.Namespace, state: Path, setup: Path | None = None
                ) -> tuple[list[subprocess.Popen[str]], list[dict[str, str]]]:
    racks = min(args.racks, args.agents)
    processes, agents = [], []
    for first in range(racks):  # agents dealt out: node i in rack i % racks
        processes.append(subprocess.Popen(
            [sys.executable, __file__, "--rack", str(first), str(racks), str(args.agents),
             str(args.gpus), str(state), str(setup or "")], stdout=subprocess.PIPE, text=True,
            cwd=REPO))
    for process in processes:
        assert process.stdout is not None
        agents += json.loads(process.stdout.readline())
    return processes, agents


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--agents", type=int, default=128)
    parser.add_argument("--gpus", type=int, default=8, help="GPUs per agent")
    parser.add_argument("--racks", type=int, default=8, help="agent processes")
    parser.add_argument("--agent-state", default=DEFAULT_AGENT_STATE, metavar="DIR",
                        help="where the agents keep their state (default: /dev/shm where it "
                             "exists; give a disk directory to include 128 agents' fsyncs "
                             "on this machine's one disk)")
    parser.add_argument("--rounds", type=int, default=3,
                        help="fan-outs, each followed by 1/ROUNDS of the one-by-one GPUs")
    parser.add_argument("--skip-sequential", action="store_true",
                        help="time the fan-out only (for profiling)")
    parser.add_argument("--as-deployed", action="store_true",
                        help="agents as `gameday agent serve` runs them from `gameday agent "
                             "init --tls`: mutual TLS, the token file, the audit trail, the "
                             "policy's limits")
    parser.add_argument("--rack", nargs=6, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rack:
        numbers = [int(value) for value in args.rack[:4]]  # first, step, agents, GPUs
        rack(*numbers, state=Path(args.rack[4]),
             setup=Path(args.rack[5]) if args.rack[5] else None)
        return

    from chaoslib.activity import ensure_activity_is_valid, run_activity

    from gameday.engine import session as sessions
    from gameday.engine.fanout import FanoutOptions
    from gameday.targets.kubernetes.target import kubernetes_target
    from gameday.testing.kube import running_standin

    with tempfile.TemporaryDirectory(prefix="gdk8s-bench-") as tmp, running_standin() as api:
        state = Path(tmp)
        agent_state = Path(tempfile.mkdtemp(prefix="gdk8s-agents-", dir=args.agent_state or tmp))
        setup = deployed_setup(state / "agent-setup") if args.as_deployed else None
        processes, agents = start_racks(args, agent_state, setup)
        try:
            token = TOKEN if setup is None else (setup / "token").read_text().strip()
            api.add_secret(NAMESPACE, "gameday-agent-token", {"token": token})
            for agent in agents:
                port = int(agent["url"].rsplit(":", 1)[1])
                api.add_node(agent["node"], {"nvidia.com/gpu.present": "true"})
                api.add_pod(NAMESPACE, f"gameday-agent-{agent['node']}", agent["node"],
                            labels={"app.kubernetes.io/name": "gameday-agent"},
                            pod_ip="127.0.0.1", port=port, owner_kind="DaemonSet")
            tls = {} if setup is None else {  # the orchestrator's end of agent init's TLS
                "agent_ca": str(setup / "tls" / "ca.crt"),
                "agent_client_cert": str(setup / "tls" / "client.crt"),
                "agent_client_key": str(setup / "tls" / "client.key")}
            target = kubernetes_target({"k8s_api_url": api.url, "k8s_api_token": api.token,
                                        **tls})
            gpus = target.gpus()
            assert setup is None or all(target.agent(g.node).url.startswith("https://")
                                        for g in gpus), "as deployed, agents are reached by TLS"

            def activity(func: str, **arguments: object) -> dict[str, object]:
                return {"type": "action", "name": func, "provider": {
                    "type": "python", "module": "faults.gpu", "func": func,
                    "arguments": arguments}}

            # validated as `gameday run` validates an experiment before its method
            # (gameday/experiment/loader.py), which imports each provider's module
            for checked in (activity("ecc_error", gpu={"percent": 100}, **ECC),
                            activity("revert")):
                ensure_activity_is_valid(checked)

            def session() -> sessions.Session:  # one run; every run in one home
                return sessions.activate(sessions.Session(
                    target=target, ledger_path=state / "home" / "ledger.jsonl"))

            walls, cpus, agents_cpus, sequential_s = [], [], [], 0.0
            for rep in range(args.rounds):  # fan-outs and thirds of the one-by-one, in turn
                fan = session()
                cpu_before = time.process_time()
                agents_cpu_before = cpu_seconds(processes)
                started = time.perf_counter()
                applied = run_activity(activity("ecc_error", gpu={"percent": 100}, **ECC),
                                       {}, {})
                reverted = run_activity(activity("revert"), {}, {})
                walls.append(time.perf_counter() - started)
                cpus.append(time.process_time() - cpu_before)
                agents_cpus.append(cpu_seconds(processes) - agents_cpu_before)
                assert len(applied["faults"]) == len(gpus)
                assert reverted == {"reverted": len(gpus)} and not fan.ledger.active()
                fan.close()

                seq = session()
                share = [] if args.skip_sequential else gpus[rep::args.rounds]
                started = time.perf_counter()
                for gpu in share:
                    run_activity(activity("ecc_error",
                                          gpu={"node": gpu.node, "index": gpu.index}, **ECC),
                                 {}, {})
                    run_activity(activity("revert"), {}, {})
                sequential_s += time.perf_counter() - started
                assert len(seq.ledger.entries()) == len(share) and not seq.ledger.active()
                seq.close()
            sessions.deactivate()
        finally:
            for process in processes:
                process.send_signal(signal.SIGTERM)
            for process in processes:
                process.wait(60)
            if args.agent_state:
                shutil.rmtree(agent_state, ignore_errors=True)
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    wall_s = statistics.fmean(walls)
    print(f"agents' state in {args.agent_state or 'a temporary directory'}; "
          f"fan-out concurrency {FanoutOptions().concurrency}; agents "
          + ("as deployed (mutual TLS, token file, audit trail, policy limits)"
             if args.as_deployed else "in plaintext, without an audit trail"))
    print(f"fan-out: inject+revert of {len(gpus)} GPUs in "
          f"{', '.join(f'{w:.3f}' for w in walls)} s (mean {wall_s:.3f} s); one by one as "
          f"activities: {sequential_s:.3f} s (CPU per fan-out: orchestrator "
          f"{statistics.fmean(cpus):.3f} s, agents {statistics.fmean(agents_cpus):.3f} s, on "
          f"{os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.1f})")
    print(f"fanout: gpus={len(gpus)} agents={len(agents)} "
          f"deployed={'yes' if args.as_deployed else 'no'} wall_s={wall_s:.3f} "
          f"sequential_s={sequential_s:.3f} ratio={sequential_s / wall_s:.1f} "
          f"orchestrator_rss_mb={rss_mb:.0f}")


if __name__ == "__main__":
    main()
