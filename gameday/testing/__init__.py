"""Helpers for testing your own experiments, fault activities and verifiers.

- :class:`FakeClock`: the clock that only moves when slept or advanced (pass it where a
  gameday API takes a ``clock``, so timing logic runs without waiting);
- :func:`agent`: a real node agent in this process, serving the agent API over real HTTP
  on loopback with a real bearer token, driving the lab's virtual GPUs (no GPU needed)
  or a backend of your own;
- :func:`run_experiment`: an experiment file run end to end through the engine, as
  ``gameday run`` runs it, in this process, with its journal read back;
- :mod:`gameday.testing.kube`: a local Kubernetes API *stand-in* over real HTTP for the
  real ``kubernetes`` client (no cluster needed; not a Kubernetes API server).

Imports: this is a test utility for users, not part of the engine. It imports the lab's
virtual GPU backend (:class:`gameday.lab.devices.VirtualGpuBackend`) for :func:`agent`,
the agent server, and the engine's runner for :func:`run_experiment`; nothing in the
engine, ``faults`` or ``verifiers`` imports it.
"""

import contextlib
import json
import os
import secrets
import signal
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from io import StringIO
from pathlib import Path
from typing import Any

from gameday.agent.server import AgentServer
from gameday.clock import FakeClock
from gameday.contract.backend import Backend
from gameday.engine import runner
from gameday.errors import GamedayError
from gameday.evidence.journal_shape import VerifierResultJSON, gameday_section
from gameday.evidence.ledger import FaultEntryJSON
from gameday.lab.devices import VirtualGpuBackend
from gameday.safety import signals
from gameday.wire.agent_client import AgentClient
from gameday.wire.fault_record import FaultRecordJSON

__all__ = ["ExperimentRun", "FakeClock", "RunningAgent", "agent", "run_experiment"]


@dataclass(frozen=True)
class RunningAgent:
    """An agent serving at ``url`` for ``node``, guarded by ``token``."""

    url: str
    token: str
    node: str
    server: AgentServer = field(repr=False)

    def client(self) -> AgentClient:
        """A client of this agent, as the engine uses it."""
        return AgentClient(self.url, self.token)

    def variables(self) -> dict[str, str]:
        """The ``--var`` values that point target ``host`` at this agent."""
        return {"agent_url": self.url, "agent_token": self.token}

    def active_faults(self) -> list[FaultRecordJSON]:
        """The faults the agent holds now, as ``GET /v1/faults`` lists them."""
        return [fault.to_json() for fault in self.server.registry.faults()]


@contextlib.contextmanager
def agent(backend: Backend | None = None, *, node: str = "node-0", gpus: int = 4,
          token: str | None = None, state_dir: Path | None = None) -> Iterator[RunningAgent]:
    """Serve a real agent for ``node`` on a free loopback port while the block runs.

    ``backend`` is what applies the faults (anything with the
    :class:`gameday.contract.backend.Backend` members); by default ``gpus`` virtual GPUs of
    the lab's device model. ``token`` defaults to a random one. The agent's state (and
    the virtual GPUs') lives in ``state_dir``, else in a temporary directory removed
    after. Leaving the block stops the agent, reverting every fault it still holds.
    """
    with tempfile.TemporaryDirectory(prefix="gameday-testing-") as tmp:
        base = state_dir or Path(tmp)
        chosen: Backend = (backend if backend is not None
                           else VirtualGpuBackend(node, base / f"{node}-gpus", gpus=gpus))
        secret = token or secrets.token_hex(16)
        server = AgentServer(chosen, token=secret, node=node,
                             state_path=base / f"agent-{node}.json").start()
        try:
            yield RunningAgent(url=server.url, token=secret, node=node, server=server)
        finally:
            server.stop()


@dataclass(frozen=True)
class ExperimentRun:
    """What one :func:`run_experiment` gave: the exit code ``gameday run`` would have
    exited with, what it printed, and its journal (``{}`` when none was written)."""

    exit_code: int
    output: str
    journal_path: Path | None
    journal: dict[str, Any]

    @property
    def verifiers(self) -> list[VerifierResultJSON]:
        """The verifier results the run recorded (the journal's ``gameday.verifiers``)."""
        return list(gameday_section(self.journal).get("verifiers") or [])

    @property
    def faults(self) -> list[FaultEntryJSON]:
        """The faults the run applied, with when they were reverted (``gameday.faults``)."""
        return list(gameday_section(self.journal).get("faults") or [])


def run_experiment(path: Path, *, home: Path, target: str | None = None,
                   on: RunningAgent | None = None, variables: Mapping[str, str] | None = None,
                   journal_path: Path | None = None) -> ExperimentRun:
    """Run the experiment at ``path`` as ``gameday run PATH [--target T] [--var K=V]...``
    does, in this process (call it from the main thread), and read its journal back.

    ``on`` points target ``host`` at that agent (``target`` defaults to ``host`` then).
    ``$GAMEDAY_HOME`` is ``home`` for the run (the ledger, target locks and, unless
    ``journal_path`` says otherwise, ``home/journal.json``). The process's SIGINT,
    SIGTERM and SIGHUP handlers are put back afterwards. Bad input does not raise: it
    is exit code 2 and its one line in ``output``, as on the command line.
    """
    values = {**(on.variables() if on is not None else {}), **(variables or {})}
    printed = StringIO()
    options = runner.RunOptions(
        path=Path(path), target=target or ("host" if on is not None else None),
        journal_path=journal_path or home / "journal.json", variables=values, out=printed)
    previous_handlers = {signum: signal.getsignal(signum) for signum in signals.HANDLED}
    previous_home = os.environ.get("GAMEDAY_HOME")
    os.environ["GAMEDAY_HOME"] = str(home)
    try:
        outcome = runner.run(options)
        exit_code, written = outcome.exit_code, outcome.journal_path
    except GamedayError as exc:
        print(f"gameday: {exc}", file=printed)
        exit_code, written = exc.exit_code, None
    finally:
        if previous_home is None:
            os.environ.pop("GAMEDAY_HOME", None)
        else:
            os.environ["GAMEDAY_HOME"] = previous_home
        for signum, handler in previous_handlers.items():
            if handler is not None:  # None: not set from Python, nothing to put back
                signal.signal(signum, handler)
        signals.reset()
    journal = json.loads(written.read_text(encoding="utf-8")) if written else {}
    return ExperimentRun(exit_code=exit_code, output=printed.getvalue(), journal_path=written,
                         journal=journal)
