"""Where a lab keeps things (:class:`LabPaths`), its shape, and its process layout.

The supervisor decides the layout (ports, names) once and writes it to
``DIR/run/layout.json``; the router and controller read it. ``lab.json`` is the public
discovery document (:mod:`gameday.lab.api`); ``layout.json`` is internal.
"""

import json
import secrets
import socket
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from gameday.errors import LabError, LabSettingError
from gameday.lab.files import write_atomic, write_json_atomic

__all__ = ["LabLayout", "LabPaths", "NodeLayout", "Shape", "free_ports", "node_name"]


def node_name(index: int) -> str:
    return f"node-{index}"


@dataclass(frozen=True)
class Shape:
    """How big a lab is: ``nodes`` x ``gpus_per_node`` GPUs serving ``shards`` shards."""

    nodes: int = 2
    gpus_per_node: int = 4
    shards: int = 6

    def check(self) -> None:
        """Raise :class:`LabSettingError` (one line, exit 2) when the shape cannot run."""
        if not 1 <= self.nodes <= 16:
            raise LabSettingError(f"nodes must be between 1 and 16, got {self.nodes}",
                                  path="--nodes")
        if not 1 <= self.gpus_per_node <= 16:
            raise LabSettingError(f"gpus per node must be between 1 and 16, got "
                                  f"{self.gpus_per_node}", path="--gpus-per-node")
        total = self.nodes * self.gpus_per_node
        if not 1 <= self.shards <= min(total, 32):
            raise LabSettingError(f"shards must be between 1 and {min(total, 32)} (one GPU "
                                  f"each) for {self.nodes} node(s) x {self.gpus_per_node} "
                                  f"GPU(s), got {self.shards}", path="--shards")

    def __str__(self) -> str:
        return f"{self.nodes}x{self.gpus_per_node}/{self.shards}"

    def to_json(self) -> dict[str, int]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Any) -> "Shape":
        return cls(int(data["nodes"]), int(data["gpus_per_node"]), int(data["shards"]))


class LabPaths:
    """The files of a lab in ``DIR``."""

    def __init__(self, root: Path) -> None:
        self.root = root

    @property
    def lab_json(self) -> Path:
        return self.root / "lab.json"

    @property
    def lock(self) -> Path:
        return self.root / "lab.lock"

    @property
    def up_lock(self) -> Path:
        return self.root / "run" / "up.lock"

    @property
    def supervisor_json(self) -> Path:
        return self.root / "run" / "supervisor.json"

    @property
    def startup_error(self) -> Path:
        return self.root / "run" / "startup-error.json"

    @property
    def layout(self) -> Path:
        return self.root / "run" / "layout.json"

    @property
    def token(self) -> Path:
        return self.root / "agent-token"

    @property
    def store(self) -> Path:
        return self.root / "store"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def prometheus(self) -> Path:
        return self.root / "prometheus"

    @property
    def shard_run(self) -> Path:
        return self.root / "run" / "shards"

    def log(self, name: str) -> Path:
        return self.logs / f"{name}.log"

    def node_dir(self, node: str) -> Path:
        return self.root / "nodes" / node

    def agent_state(self, node: str) -> Path:
        return self.node_dir(node) / "agent-state.json"

    def write_token(self) -> str:
        """Create a new random token (32 bytes, hex) in ``agent-token``, mode 0600."""
        token = secrets.token_hex(32)
        write_atomic(self.token, token + "\n", mode=0o600)
        return token

    def read_token(self) -> str:
        try:
            return self.token.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise LabError(f"{self.token}: cannot read the lab token ({exc.strerror})") from None


@dataclass(frozen=True)
class NodeLayout:
    name: str
    gpus: int
    exporter_port: int
    agent_port: int
    link_port: int = 0  # the node's link (gameday.lab.link); 0: none

    @property
    def link_address(self) -> str:
        return f"127.0.0.1:{self.link_port}"

    @property
    def exporter_url(self) -> str:
        return f"http://127.0.0.1:{self.exporter_port}"

    @property
    def agent_url(self) -> str:
        return f"http://127.0.0.1:{self.agent_port}"


@dataclass(frozen=True)
class LabLayout:
    """Every process's place: the shape, the ports, the URLs."""

    dir: Path
    shape: Shape
    prometheus_port: int
    router_port: int
    controller_port: int
    nodes: tuple[NodeLayout, ...]
    trainer_port: int = 0

    @property
    def prometheus_url(self) -> str:
        return f"http://127.0.0.1:{self.prometheus_port}"

    @property
    def router_url(self) -> str:
        return f"http://127.0.0.1:{self.router_port}"

    @property
    def controller_url(self) -> str:
        return f"http://127.0.0.1:{self.controller_port}"

    @property
    def trainer_url(self) -> str:
        return f"http://127.0.0.1:{self.trainer_port}"

    @classmethod
    def plan(cls, root: Path, shape: Shape) -> "LabLayout":
        """Pick free loopback ports for a lab of ``shape`` in ``root``."""
        ports = free_ports(4 + 3 * shape.nodes)
        nodes = tuple(NodeLayout(node_name(i), shape.gpus_per_node, ports[3 + 2 * i],
                                 ports[4 + 2 * i], ports[3 + 2 * shape.nodes + i])
                      for i in range(shape.nodes))
        return cls(root, shape, ports[0], ports[1], ports[2], nodes, trainer_port=ports[-1])

    def to_json(self) -> dict[str, Any]:
        return {"dir": str(self.dir), "shape": self.shape.to_json(),
                "prometheus_port": self.prometheus_port, "router_port": self.router_port,
                "controller_port": self.controller_port, "trainer_port": self.trainer_port,
                "nodes": [asdict(n) for n in self.nodes]}

    @classmethod
    def from_json(cls, data: Any) -> "LabLayout":
        return cls(Path(data["dir"]), Shape.from_json(data["shape"]),
                   int(data["prometheus_port"]), int(data["router_port"]),
                   int(data["controller_port"]),
                   tuple(NodeLayout(**n) for n in data["nodes"]),
                   trainer_port=int(data.get("trainer_port", 0)))

    def save(self, path: Path) -> None:
        write_json_atomic(path, self.to_json())

    @classmethod
    def load(cls, path: Path) -> "LabLayout":
        try:
            return cls.from_json(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise LabError(f"{path}: cannot read the lab layout ({exc})") from None


def free_ports(count: int) -> list[int]:
    """``count`` distinct free TCP ports on 127.0.0.1 (bound together, then released)."""
    socks = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            socks.append(sock)
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for sock in socks:
            sock.close()
