"""The fleet curve: the orchestrator's fan-out (inject + revert of one fault on every GPU)
at 1,024 to 131,072 GPUs, the agents simulated many to a process.

``bench/fanout.py`` runs REAL agents (128 agent servers, 16 to an interpreter); at fleet
sizes real agents cannot share this machine's two cores with the orchestrator (an agent
spends about 1 ms of CPU per batch request: 16,384 agents' inject and revert would be
32 s of agent CPU). So here each agent is a STAND-IN, many to a process, and what is
measured is the orchestrator, the fan-out's one serial part, whose CPU no fleet spreads:

- the agents: ``--agent-processes`` subprocesses, each serving its share of the nodes on
  a loopback address of its own per node (``127.1.x.y:9410``: one address per agent, as
  pod IPs are; 16,384 ports would exhaust the ephemeral range). A stand-in speaks the
  agent API's wire the way the real agent does (HTTP/1.1 kept alive, ``Content-Length``,
  the bearer token checked, 401 without it) for what a fan-out asks: ``GET
  /v1/inventory`` (the answer a real agent with the lab's 8 virtual GPUs gives, read
  from one at start-up), ``POST /v1/faults:batch``, ``:batch-revert`` and
  ``:batch-renew``, each answered minimally (``Prefer: return=minimal``,
  :data:`gameday.wire.protocol.MINIMAL_FIELDS`) with ids it made; anything else is a
  404, which the fan-out would report. It applies nothing: it stands in for 16,384
  machines, each with its own CPUs. Its requests are split by hand (head, then
  ``Content-Length`` bytes), not by h11 as the agent's are: this is no security
  boundary (the orchestrator's own requests), and it is what keeps the stand-ins out of
  the figure: framed by h11 they took twice the CPU (0.040 -> 0.075 s per fan-out at
  1,024 GPUs, 0.55 -> 1.10 s at 16,384), which showed as the orchestrator's wall
  (0.077 -> 0.158 s, 1.41 -> 1.67 s) on this machine's two shared cores.
- the Kubernetes API: the stand-in of ``gameday/testing/kube.py`` in a process of its
  own (its objects are not the orchestrator's memory), listing the GPU nodes and their
  agent pods;
- the orchestrator: a fresh process per fleet size (its peak RSS is that size's), which
  discovers the fleet through the REAL kubernetes client (``--target kubernetes``),
  then runs ``faults.gpu.ecc_error(gpu={percent: 100})`` and ``faults.gpu.revert``
  through chaoslib's ``run_activity``, ``--rounds`` times, each a run of its own with
  its ledger and target locks on disk (fsync'd), as ``gameday run`` does.

A line per size: ``fleet-point: gpus=… agents=… wall_s=… orchestrator_cpu_s=…
agents_cpu_s=… orchestrator_rss_mb=… discovery_s=…`` (wall and CPU: the mean per
fan-out). Last line: ``fleet: gpus=1024,… wall_s=…,… growth=…`` where ``growth`` is how
much the wall per GPU grew from the smallest to the largest size (1.0: linear).
Goals (issue 28): 16,384 GPUs <= 1 s; 131,072 GPUs <= 5 s with the orchestrator under
500 MB; growth linear or better.
"""

import argparse
import json
import os
import resource
import selectors
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import cast

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from fanout import NAMESPACE, TOKEN, cpu_seconds, wait_for_term  # noqa: E402

PORT = 9410
SIZES = (1024, 4096, 16384, 65536, 131072)


def address(number: int) -> str:
    """Agent ``number``'s loopback address (127.1.0.1 onwards; never 127.0.0.1)."""
    number += 1
    return f"127.{1 + number // 65536}.{number // 256 % 256}.{number % 256}"


def node_name(number: int) -> str:
    return f"gpu-node-{number:05d}"


# -- the agents' stand-in --------------------------------------------------------------

def real_inventory(gpus: int) -> dict[str, object]:
    """What a real agent with the lab's virtual GPUs answers to ``GET /v1/inventory``."""
    import logging

    import structlog

    from gameday.agent.server import AgentServer
    from gameday.lab.devices import VirtualGpuBackend
    from gameday.wire.agent_client import AgentClient

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    with tempfile.TemporaryDirectory(prefix="gdfleet-inv-") as tmp:
        server = AgentServer(VirtualGpuBackend("template", Path(tmp) / "gpus", gpus=gpus),
                             token=TOKEN, state_path=Path(tmp) / "agent.json",
                             node="template").start()
        try:
            return AgentClient(server.url, TOKEN).inventory()
        finally:
            server.stop(revert=True)


class StandinAgent:
    """One agent's end of the wire: requests parsed off its connections, answered in
    one write each."""

    def __init__(self, node: str, inventory: dict[str, object]) -> None:
        self.node = node
        self.inventory = json.dumps({**inventory, "node": node}).encode()
        self.count = 0

    def answer(self, method: str, path: str, headers: dict[str, str], body: bytes
               ) -> tuple[int, bytes]:
        if headers.get("authorization") != f"Bearer {TOKEN}":
            return 401, b'{"error": "unauthorized"}'
        if method == "GET" and path == "/v1/inventory":
            return 200, self.inventory
        if method != "POST":
            return 404, b'{"error": "not found"}'
        request = json.loads(body)
        now = time.time()
        if path == "/v1/faults:batch":
            faults = []
            for item in request["faults"]:
                self.count += 1
                faults.append({"id": f"{self.node}-{self.count}", "injected_at": "",
                               "applied_at": now, "expires_at": now + item["lease_s"],
                               "details": {}})
            return 200, json.dumps({"faults": faults}).encode()
        if path == "/v1/faults:batch-revert":
            return 200, json.dumps({"faults": [
                {"id": i, "reverted_at": now, "revert_reason": "requested"}
                for i in request["ids"]], "failed": []}).encode()
        if path == "/v1/faults:batch-renew":
            lease = request.get("lease_s", 60)
            return 200, json.dumps({"faults": [
                {"id": i, "lease_s": lease, "expires_at": now + lease}
                for i in request["ids"]], "failed": []}).encode()
        return 404, b'{"error": "not found"}'


def serve_agents(numbers: list[int], gpus: int) -> None:
    """Serve the stand-in agents ``numbers`` on one thread until SIGTERM."""
    inventory = real_inventory(gpus)
    selector = selectors.DefaultSelector()
    for number in numbers:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((address(number), PORT))
        listener.listen(64)
        listener.setblocking(False)
        selector.register(listener, selectors.EVENT_READ,
                          ("listen", StandinAgent(node_name(number), inventory)))
    print("ready", flush=True)
    stop = False

    def on_term(signum: int, frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    buffers: dict[int, bytearray] = {}
    while not stop:
        for key, _ in selector.select(0.2):
            role, agent = key.data
            sock = cast(socket.socket, key.fileobj)
            if role == "listen":
                conn, _ = sock.accept()
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                buffers[conn.fileno()] = bytearray()
                selector.register(conn, selectors.EVENT_READ, ("conn", agent))
                continue
            try:
                data = sock.recv(1 << 20)
            except ConnectionError:  # the orchestrator went away
                data = b""
            if not data:
                selector.unregister(sock)
                buffers.pop(sock.fileno(), None)
                sock.close()
                continue
            buffer = buffers[sock.fileno()]
            buffer += data
            while (end := buffer.find(b"\r\n\r\n")) >= 0:
                lines = buffer[:end].decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {name.strip().lower(): value.strip() for name, _, value in
                           (line.partition(":") for line in lines[1:])}
                length = int(headers.get("content-length", "0"))
                if len(buffer) < end + 4 + length:
                    break
                body = bytes(buffer[end + 4:end + 4 + length])
                del buffer[:end + 4 + length]
                status, payload = agent.answer(method, path, headers, body)
                sock.sendall(f"HTTP/1.1 {status} {'OK' if status == 200 else 'Error'}\r\n"
                             f"Content-Type: application/json\r\n"
                             f"Content-Length: {len(payload)}\r\n\r\n".encode() + payload)


# -- the Kubernetes API's stand-in -------------------------------------------------------

def serve_kube(agents: int) -> None:
    """The Kubernetes API stand-in listing ``agents`` GPU nodes and their agent pods."""
    from gameday.testing.kube import running_standin

    with running_standin() as api:
        api.add_secret(NAMESPACE, "gameday-agent-token", {"token": TOKEN})
        for number in range(agents):
            api.add_node(node_name(number), {"nvidia.com/gpu.present": "true"})
            api.add_pod(NAMESPACE, f"gameday-agent-{node_name(number)}", node_name(number),
                        labels={"app.kubernetes.io/name": "gameday-agent"},
                        pod_ip=address(number), port=PORT, owner_kind="DaemonSet")
        print(json.dumps({"url": api.url, "token": api.token}), flush=True)
        wait_for_term()


# -- the orchestrator --------------------------------------------------------------------

def point(api: dict[str, str], rounds: int, profile: str | None) -> dict[str, float]:
    """Discover the fleet and fan out ``rounds`` times; the figures of this process.
    With ``profile``, the fan-outs' cProfile statistics are written to that file (the
    profiler roughly doubles the wall: read it for shares, not for figures)."""
    import cProfile
    import logging

    import structlog
    from chaoslib.activity import ensure_activity_is_valid, run_activity

    from gameday.engine import session as sessions
    from gameday.targets.kubernetes.target import kubernetes_target

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    resource.setrlimit(resource.RLIMIT_NOFILE, (resource.getrlimit(resource.RLIMIT_NOFILE)[1],) * 2)
    started = time.perf_counter()
    target = kubernetes_target({"k8s_api_url": api["url"], "k8s_api_token": api["token"]})
    gpus = target.gpus()
    discovery_s = time.perf_counter() - started

    def activity(func: str, **arguments: object) -> dict[str, object]:
        return {"type": "action", "name": func, "provider": {
            "type": "python", "module": "faults.gpu", "func": func, "arguments": arguments}}

    inject = activity("ecc_error", gpu={"percent": 100}, kind="single_bit", count=1)
    for checked in (inject, activity("revert")):
        ensure_activity_is_valid(checked)
    walls, cpus = [], []
    profiler = cProfile.Profile() if profile else None
    with tempfile.TemporaryDirectory(prefix="gdfleet-home-") as home:
        for _ in range(rounds):
            run = sessions.activate(sessions.Session(
                target=target, ledger_path=Path(home) / "ledger.jsonl"))
            cpu, began = time.process_time(), time.perf_counter()
            if profiler:
                profiler.enable()
            applied = run_activity(inject, {}, {})
            reverted = run_activity(activity("revert"), {}, {})
            if profiler:
                profiler.disable()
            walls.append(time.perf_counter() - began)
            cpus.append(time.process_time() - cpu)
            assert len(applied["faults"]) == len(gpus), applied
            assert reverted == {"reverted": len(gpus)} and not run.ledger.active()
            run.close()
        sessions.deactivate()
    if profiler and profile:
        profiler.dump_stats(profile)
    return {"gpus": len(gpus), "wall_s": statistics.fmean(walls),
            "orchestrator_cpu_s": statistics.fmean(cpus), "discovery_s": discovery_s,
            "orchestrator_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def measure(gpus: int, args: argparse.Namespace) -> dict[str, float]:
    """One fleet size: the stand-ins started, an orchestrator process run, all stopped."""
    agents = gpus // args.gpus_per_node
    me = [sys.executable, __file__]
    standins = [subprocess.Popen([*me, "--serve-agents", str(first), str(args.agent_processes),
                                  str(agents), str(args.gpus_per_node)],
                                 stdout=subprocess.PIPE, text=True, cwd=REPO)
                for first in range(min(args.agent_processes, agents))]
    kube = subprocess.Popen([*me, "--serve-kube", str(agents)], stdout=subprocess.PIPE,
                            text=True, cwd=REPO)
    try:
        for process in standins:
            assert process.stdout is not None and process.stdout.readline().strip() == "ready"
        assert kube.stdout is not None
        api = kube.stdout.readline()
        before = cpu_seconds(standins)
        profile = ([f"{args.profile}.{gpus}"] if args.profile else [])
        orchestrator = subprocess.run([*me, "--point", api.strip(), str(args.rounds),
                                       *profile],
                                      capture_output=True, text=True, cwd=REPO, check=False)
        if orchestrator.returncode != 0:
            raise SystemExit(f"fleet: {gpus} GPUs: the orchestrator failed:\n"
                             f"{orchestrator.stderr[-3000:]}")
        figures: dict[str, float] = json.loads(orchestrator.stdout.strip().splitlines()[-1])
        figures["agents"] = agents
        # the stand-ins' CPU over the whole point, discovery included, per fan-out
        figures["agents_cpu_s"] = (cpu_seconds(standins) - before) / args.rounds
        return figures
    finally:
        for process in [*standins, kube]:
            process.send_signal(signal.SIGTERM)
        for process in [*standins, kube]:
            process.wait(60)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)),
                        help="fleet sizes in GPUs, comma-separated (default: %(default)s)")
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--agent-processes", type=int, default=4,
                        help="processes the stand-in agents are dealt out to")
    parser.add_argument("--rounds", type=int, default=2, help="fan-outs per size")
    parser.add_argument("--serve-agents", nargs=4, type=int, help=argparse.SUPPRESS)
    parser.add_argument("--serve-kube", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--profile", metavar="FILE",
                        help="write each size's fan-out profile (cProfile) to FILE.GPUS")
    parser.add_argument("--point", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_agents:
        first, step, agents, gpus = args.serve_agents
        serve_agents(list(range(first, agents, step)), gpus)
        return
    if args.serve_kube is not None:
        serve_kube(args.serve_kube)
        return
    if args.point:
        profile = args.point[2] if len(args.point) > 2 else None
        print(json.dumps(point(json.loads(args.point[0]), int(args.point[1]), profile)))
        return
    points = []
    for gpus in (int(size) for size in args.sizes.split(",")):
        figures = measure(gpus, args)
        points.append(figures)
        print(f"fleet-point: gpus={figures['gpus']:.0f} agents={figures['agents']:.0f} "
              f"wall_s={figures['wall_s']:.3f} "
              f"orchestrator_cpu_s={figures['orchestrator_cpu_s']:.3f} "
              f"agents_cpu_s={figures['agents_cpu_s']:.3f} "
              f"orchestrator_rss_mb={figures['orchestrator_rss_mb']:.0f} "
              f"discovery_s={figures['discovery_s']:.1f} "
              f"(load average {os.getloadavg()[0]:.1f})", flush=True)
    first, last = points[0], points[-1]
    growth = (last["wall_s"] / last["gpus"]) / (first["wall_s"] / first["gpus"])
    print("fleet: gpus=" + ",".join(f"{p['gpus']:.0f}" for p in points)
          + " wall_s=" + ",".join(f"{p['wall_s']:.3f}" for p in points)
          + " orchestrator_rss_mb=" + ",".join(f"{p['orchestrator_rss_mb']:.0f}" for p in points)
          + f" growth={growth:.2f}")


if __name__ == "__main__":
    main()
