"""Test helpers for the agent: a tiny real backend and a way to run a real agent process.

``MarkerBackend`` really does something other processes can observe: applying a fault
creates a marker file named after the fault id, reverting it deletes the file. The agent
subprocess loads it with ``--backend tests.agent.agent_marker:factory`` (the repo on
PYTHONPATH, markers in ``$GAMEDAY_TEST_MARKER_DIR``).
"""

import os
import pathlib
import selectors
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gameday import kinds
from gameday.contract.backend import FaultRequest
from gameday.errors import FaultRejected

REPO = pathlib.Path(__file__).resolve().parents[2]
MARKER_DIR_ENV = "GAMEDAY_TEST_MARKER_DIR"
KIND = "test.marker"


@dataclass(frozen=True, kw_only=True)
class MarkerParams(kinds.KindParams):
    """``test.marker``'s parameters."""

    reject: str | None = kinds.param("apply raises FaultRejected with this reason",
                                     default=None)
    revert_delay_s: float = kinds.param("revert sleeps this long", default=0.0, minimum=0.0,
                                        maximum=60.0)
    fail_reverts: int = kinds.param("that many reverts raise before one succeeds",
                                    default=0, minimum=0, maximum=100)
    note: str | None = kinds.param("free text carried with the fault", default=None)
    api_token: str | None = kinds.param("a secret the audit trail must redact",
                                        default=None)


#: The marker kind's declaration, registered so that the agent checks its params.
MARKER = kinds.register(kinds.KindSpec(
    name=KIND, summary="a marker file named after the fault id", module=__name__,
    func="factory", coverage_layer="node", injected_at={"host": "process"},
    params_type=MarkerParams, seen_through="the marker file"))


class MarkerBackend:
    """Kinds ``{"test.marker": "process"}``, its params declared by :data:`MARKER`:
    ``reject`` (apply raises FaultRejected), ``revert_delay_s`` (revert is slow),
    ``fail_reverts`` (that many reverts raise before one succeeds), ``note`` and
    ``api_token`` (carried, never read)."""

    name = "marker"

    def __init__(self, directory: pathlib.Path, node: str = "test-node") -> None:
        self.directory = directory
        self.node = node
        self.applies: list[str] = []
        self.reverts: list[str] = []
        self._failed: dict[str, int] = {}
        self._lock = threading.Lock()
        directory.mkdir(parents=True, exist_ok=True)

    def inventory(self) -> dict[str, Any]:
        return {"node": self.node, "gpus": [{"index": 0, "uuid": "GPU-marker-0",
                                             "name": "marker", "memory_mib": 1,
                                             "nvlink_domain": None}],
                "links": [], "mounts": []}

    def kinds(self) -> Mapping[str, str]:
        return {KIND: "process"}

    def marker(self, fault_id: str) -> pathlib.Path:
        return self.directory / fault_id

    def markers(self) -> set[str]:
        return {p.name for p in self.directory.iterdir()}

    def apply(self, fault_id: str, request: FaultRequest) -> dict[str, Any]:
        params = MARKER.parse(request.params)
        if params.reject:
            raise FaultRejected(f"marker refuses: {params.reject}")
        self.marker(fault_id).write_text(request.kind)
        with self._lock:
            self.applies.append(fault_id)
        return {"marker": str(self.marker(fault_id))}

    def revert(self, fault_id: str, request: FaultRequest) -> None:
        params = MARKER.parse(request.params)
        if params.revert_delay_s:
            time.sleep(params.revert_delay_s)
        with self._lock:
            failures = self._failed.get(fault_id, 0)
            if failures < params.fail_reverts:
                self._failed[fault_id] = failures + 1
                raise RuntimeError(f"marker revert failure {failures + 1}")
            self.reverts.append(fault_id)
        self.marker(fault_id).unlink(missing_ok=True)


def factory(node: str) -> MarkerBackend:
    """The ``--backend tests.agent.agent_marker:factory`` entry used by the agent subprocess."""
    return MarkerBackend(pathlib.Path(os.environ[MARKER_DIR_ENV]), node=node)


def agent_env(marker_dir: pathlib.Path, token: str | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "GAMEDAY_AGENT_TOKEN"}
    env["PYTHONPATH"] = str(REPO)
    env[MARKER_DIR_ENV] = str(marker_dir)
    if token is not None:
        env["GAMEDAY_AGENT_TOKEN"] = token
    return env


def run_agent(args: list[str], env: Mapping[str, str], stderr_path: pathlib.Path
              ) -> subprocess.Popen[str]:
    """Start ``python -m gameday.agent.serve ARGS`` (stdout piped, stderr to a file)."""
    with stderr_path.open("a") as stderr:
        return subprocess.Popen([sys.executable, "-m", "gameday.agent.serve", *args],
                                cwd=REPO, env=dict(env), stdout=subprocess.PIPE,
                                stderr=stderr, text=True)


def read_url(proc: subprocess.Popen[str], timeout_s: float = 10.0) -> str:
    """Wait for ``agent listening on URL`` on the agent's stdout and return URL."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout_s
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        while time.monotonic() < deadline:
            if sel.select(timeout=max(0.0, deadline - time.monotonic())):
                line = proc.stdout.readline()
                if not line:
                    break
                if line.startswith("agent listening on "):
                    return line.removeprefix("agent listening on ").strip()
    raise AssertionError(f"agent did not start (exit status {proc.poll()})")


def kill(proc: subprocess.Popen[str]) -> None:
    """Make sure the process is gone (used in ``finally``)."""
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=10)
    if proc.stdout is not None:
        proc.stdout.close()


#: A token the agent takes as strong (66 hex digits), for agents started from a token file.
STRONG_TOKEN = "42" + "0123456789abcdef" * 4


def marker_dirs(tmp_path: pathlib.Path) -> dict[str, pathlib.Path]:
    """A marker agent's places under ``tmp_path``: its marker, state and stderr paths and
    a token file (mode 0600) holding :data:`STRONG_TOKEN`."""
    markers = tmp_path / "markers"
    markers.mkdir()
    token_file = tmp_path / "token"
    token_file.write_text(STRONG_TOKEN + "\n")
    token_file.chmod(0o600)
    return {"markers": markers, "state": tmp_path / "state", "token": token_file,
            "stderr": tmp_path / "agent.stderr"}


def marker_agent_args(dirs: dict[str, pathlib.Path], node: str) -> list[str]:
    """``agent serve`` arguments of a marker agent on ``dirs`` (:func:`marker_dirs`)."""
    return ["--backend", "tests.agent.agent_marker:factory", "--listen", "127.0.0.1:0",
            "--token-file", str(dirs["token"]), "--state-dir", str(dirs["state"]),
            "--node", node]


def marker_names(dirs: dict[str, pathlib.Path]) -> set[str]:
    """The fault ids whose markers exist (the faults the agent holds)."""
    return {p.name for p in dirs["markers"].iterdir()}
