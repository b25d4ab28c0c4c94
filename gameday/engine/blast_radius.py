"""The run's blast radius: what its faults may touch, judged before anything is injected.

Two sources of limits: the experiment's ``extensions.gameday.blast_radius`` (how many
GPUs and nodes, and what percent of the fleet's GPUs, one run may fault) and the target
configuration's allowlist (``allow.nodes``, ``allow.namespaces``). Each check counts
what the run's ledger already holds plus what is about to be added, and raises
:class:`gameday.errors.BlastRadiusExceeded` (one line ending "nothing injected") when a
limit would be passed.
"""

from collections.abc import Callable, Iterable

from gameday.errors import BlastRadiusExceeded
from gameday.evidence.ledger import Ledger
from gameday.experiment.extension import BlastRadius as Limits
from gameday.safety.targetconfig import TargetConfig
from gameday.targets.base import GpuRef

__all__ = ["BlastRadius"]


class BlastRadius:
    """The limits of one run: ``limits`` (the extension's), ``config`` (the allowlist), over
    what ``ledger`` holds; ``fleet`` counts the target's GPUs (asked once, when a percent
    limit first needs it)."""

    def __init__(self, limits: Limits, config: TargetConfig, ledger: Ledger,
                 fleet: Callable[[], int]) -> None:
        self.limits = limits
        self.config = config
        self.ledger = ledger
        self._fleet = fleet
        self._fleet_gpus: int | None = None

    def check_node(self, node: str) -> None:
        """Refuse a node outside ``allow.nodes``."""
        if not self.config.node_allowed(node):
            raise BlastRadiusExceeded(
                f"node {node} is not in the allowlist of {self.config.source} "
                f"(allow.nodes: {', '.join(sorted(self.config.allowed_nodes or ()))}); "
                "nothing injected")

    def check_nodes(self, nodes: Iterable[str]) -> None:
        """Refuse new faults on ``nodes`` that would take the run past ``max_nodes`` (with
        the nodes its ledger already holds) or outside the allowlist."""
        touched = {entry.node for entry in self.ledger} | set(nodes)
        for node in sorted(touched):
            self.check_node(node)
        self._check_node_count(touched)

    def check_gpus(self, new_gpus: Iterable[GpuRef]) -> None:
        """Refuse new faults on ``new_gpus`` that would take the run past ``max_gpus``,
        ``max_nodes`` or ``max_percent`` (with the GPUs its ledger already holds), or onto a
        node outside the allowlist."""
        touched = {(e.node, e.target.get("gpu")) for e in self.ledger if "gpu" in e.target}
        touched |= {(g.node, g.index) for g in new_gpus}
        nodes = {node for node, _ in touched}
        for node in sorted(nodes):
            self.check_node(node)
        limit = self.limits
        if limit.max_gpus is not None and len(touched) > limit.max_gpus:
            raise BlastRadiusExceeded(
                f"{len(touched)} GPUs would be faulted, blast_radius.max_gpus is "
                f"{limit.max_gpus}; nothing injected")
        self._check_node_count(nodes)
        if limit.max_percent is not None and touched:
            fleet = self.fleet_gpus()
            percent = 100.0 * len(touched) / fleet if fleet else 100.0
            if percent > limit.max_percent:
                raise BlastRadiusExceeded(
                    f"{len(touched)} of the fleet's {fleet} GPUs ({percent:.1f}%) would be "
                    f"faulted, blast_radius.max_percent is {limit.max_percent:g}; "
                    "nothing injected")

    def check_namespace(self, namespace: str) -> None:
        """Refuse a Kubernetes-level fault outside ``allow.namespaces``."""
        if not self.config.namespace_allowed(namespace):
            raise BlastRadiusExceeded(
                f"namespace {namespace} is not in the allowlist of {self.config.source} "
                f"(allow.namespaces: "
                f"{', '.join(sorted(self.config.allowed_namespaces or ()))}); "
                "nothing injected")

    def fleet_gpus(self) -> int:
        """How many GPUs the whole target has (asked once)."""
        if self._fleet_gpus is None:
            self._fleet_gpus = self._fleet()
        return self._fleet_gpus

    def _check_node_count(self, nodes: set[str]) -> None:
        limit = self.limits.max_nodes
        if limit is not None and len(nodes) > limit:
            raise BlastRadiusExceeded(
                f"{len(nodes)} nodes would be faulted, blast_radius.max_nodes is {limit}; "
                "nothing injected")
