"""A lab node: owns virtual GPUs, exports dcgm-style metrics, runs the node's agent.

``python -m gameday.lab.node --dir DIR --name node-0 --gpus 4 --exporter-port P
--agent-port Q [--parent-pid PID]``

The exporter serves ``/metrics`` (and ``/healthz``) on ``P``; the agent
(:class:`gameday.agent.server.AgentServer` over :class:`VirtualGpuBackend`) serves the
agent API on ``Q`` with the lab's token and the lab's policy (:data:`POLICY`: the kinds
the lab offers, caps on leases and active faults), its state in ``DIR/nodes/<name>/``. GPU state
starts fresh (a node boot resets volatile counters). SIGTERM or SIGINT reverts every
active fault and exits 0.
"""

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Final

import structlog

from gameday.lab.devices import VirtualGpuBackend
from gameday.lab.exporter import CONTENT_TYPE, render_dcgm
from gameday.lab.httpjson import Handler, JsonServer, Request, Response, json_response
from gameday.lab.layout import LabPaths
from gameday.lab.link import LabLink
from gameday.lab.logs import configure_logging
from gameday.lab.nodebackend import NodeBackend, NodeContext, node_handlers
from gameday.lab.proc import lab_parser, stop_on_signals, tie_to_parent

__all__ = ["POLICY", "main"]

#: The policy every lab node's agent enforces.
POLICY: Final = Path(__file__).with_name("agent-policy.yml")

log = structlog.get_logger("gameday.lab.node")


def exporter_routes(name: str, backend: VirtualGpuBackend) -> dict[tuple[str, str], Handler]:
    """``/metrics`` (dcgm-exporter text) and ``/healthz``."""

    def metrics(_: Request) -> Response:
        return Response(200, render_dcgm(backend.snapshot()).encode(), CONTENT_TYPE)

    def healthz(_: Request) -> Response:
        return json_response(200, {"ok": True, "node": name,
                                   "gpus": len(backend.snapshot())})

    return {("GET", "/metrics"): metrics, ("GET", "/healthz"): healthz}


def main(argv: Sequence[str] | None = None) -> int:
    parser = lab_parser("gameday.lab.node")
    parser.add_argument("--name", required=True)
    parser.add_argument("--gpus", type=int, default=4)
    parser.add_argument("--exporter-port", type=int, required=True)
    parser.add_argument("--agent-port", type=int, required=True)
    parser.add_argument("--link-port", type=int, default=0)
    args = parser.parse_args(argv)
    tie_to_parent(args.parent_pid)
    configure_logging(args.name)
    from gameday.agent.policy import load_policy  # the agent's imports are not small
    from gameday.agent.server import AgentServer

    paths = LabPaths(args.dir)
    stop = stop_on_signals()
    gpus = VirtualGpuBackend(args.name, paths.node_dir(args.name), gpus=args.gpus, fresh=True)
    link = LabLink(args.name, args.link_port)
    backend = NodeBackend(gpus, node_handlers(NodeContext(node=args.name, paths=paths,
                                                          link=link)))
    exporter = JsonServer(exporter_routes(args.name, gpus), port=args.exporter_port,
                          on_error=lambda exc: log.exception("exporter_error"))
    agent = AgentServer(backend, token=paths.read_token(),
                        state_path=paths.agent_state(args.name), node=args.name,
                        port=args.agent_port, limits=load_policy(POLICY).limits())
    exporter.start()
    link.start()
    agent.start()
    log.info("node_ready", exporter=exporter.url, agent=agent.url, gpus=args.gpus)
    stop.wait()
    reverted = agent.stop(revert=True)
    link.stop()
    exporter.stop()
    log.info("node_stopped", reverted=len(reverted))
    return 0


if __name__ == "__main__":
    sys.exit(main())
