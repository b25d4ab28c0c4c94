"""The lab supervisor: starts every lab process, says when the lab is ready, and stops
everything on SIGTERM.

``python -m gameday.lab.supervisor --dir DIR [--nodes 2] [--gpus-per-node 4]
[--shards 6] [--timeout 30]`` (started detached by :func:`gameday.lab.api.up`).

It holds an exclusive ``flock`` on ``DIR/lab.lock`` for its whole life, is the leader of
the process group every lab process lives in, and writes ``DIR/lab.json`` (atomically)
once the lab is ready: every shard serves through the router (a real ``/predict``
answers) and Prometheus scrapes every target. A process that exits is restarted. On
SIGTERM/SIGINT/SIGHUP it stops the controller (and its shards), the router, the nodes
(their agents revert every fault), the store's fault filesystem (``DIR/store`` is a
FUSE mount it makes first: :mod:`gameday.lab.storage`) and Prometheus, removes
``lab.json`` and exits 0.
If the lab cannot start, ``DIR/run/startup-error.json`` says why and it exits 1.
"""

import argparse
import fcntl
import os
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any, Literal

import structlog

from gameday.clock import SYSTEM_CLOCK, Clock
from gameday.errors import LabError
from gameday.lab import prometheus
from gameday.lab.files import write_json_atomic
from gameday.lab.httpjson import fetch_json
from gameday.lab.layout import LabLayout, LabPaths, Shape
from gameday.lab.logs import configure_logging
from gameday.lab.model import ModelSpec, write_store
from gameday.lab.proc import parent_death_preexec, python_argv, spawn, stop_processes
from gameday.lab.storage import store_mount
from gameday.node.faultfs.control import ControlError

__all__ = ["LAB_JSON_VERSION", "Supervisor", "main"]

log = structlog.get_logger("gameday.lab.supervisor")

LAB_JSON_VERSION = 1
Role = Literal["prometheus", "node", "router", "controller", "trainer", "supervisor"]


@dataclass
class Child:
    """A process the supervisor keeps running."""

    name: str
    role: Role
    argv: list[str]
    url: str | None
    health_url: str | None
    preexec: bool = False
    popen: subprocess.Popen[bytes] | None = None
    restarts: int = 0
    restart_at: float | None = None  # monotonic, while waiting to restart


class StartupFailed(LabError):
    def __init__(self, message: str, log_path: Path | None = None) -> None:
        self.log_path = log_path
        super().__init__(message)


class Supervisor:
    def __init__(self, paths: LabPaths, shape: Shape, *, clock: Clock = SYSTEM_CLOCK) -> None:
        self.paths = paths
        self.shape = shape
        self.clock = clock
        self.stop = threading.Event()
        self.started_at = clock.now()
        self.layout = LabLayout.plan(paths.root, shape)
        self.children: list[Child] = []
        self.ready_at: float | None = None
        #: What the start-up waited for, and from when (seconds after ``started_at``).
        self.startup: list[dict[str, Any]] = []
        self.store = store_mount(paths)  # DIR/store on the fault filesystem

    # -- preparation ------------------------------------------------------------------

    def prepare(self) -> None:
        """Fresh run state, token, weights, layout, Prometheus files; plan the children."""
        paths = self.paths
        for stale in (paths.lab_json, paths.startup_error):
            stale.unlink(missing_ok=True)
        self.mount_store()
        for tree in (paths.prometheus / "data", paths.shard_run, paths.root / "nodes",
                     paths.store / "checkpoints"):
            shutil.rmtree(tree, ignore_errors=True)
        paths.write_token()
        write_store(paths.store, ModelSpec(shards=self.shape.shards))
        self.layout.save(paths.layout)
        binary = prometheus.prometheus_binary()
        config = prometheus.write_files(self.layout, paths.prometheus)
        me = str(os.getpid())
        root = str(paths.root)
        layout = self.layout
        self.children = [Child(
            "prometheus", "prometheus",
            prometheus.prometheus_argv(binary, config, paths.prometheus / "data",
                                       layout.prometheus_port),
            layout.prometheus_url, layout.prometheus_url + "/-/ready", preexec=True)]
        for node in layout.nodes:
            self.children.append(Child(
                node.name, "node",
                python_argv("gameday.lab.node", "--dir", root, "--name", node.name,
                            "--gpus", str(node.gpus), "--exporter-port",
                            str(node.exporter_port), "--agent-port", str(node.agent_port),
                            "--link-port", str(node.link_port),
                            "--parent-pid", me),
                node.agent_url, node.agent_url + "/healthz"))
        self.children.append(Child(
            "router", "router",
            python_argv("gameday.lab.router", "--dir", root, "--port", str(layout.router_port),
                        "--parent-pid", me),
            layout.router_url, layout.router_url + "/healthz"))
        self.children.append(Child(
            "controller", "controller",
            python_argv("gameday.lab.controller", "--dir", root, "--port",
                        str(layout.controller_port), "--parent-pid", me),
            layout.controller_url, layout.controller_url + "/healthz"))
        self.children.append(Child(
            "trainer", "trainer",
            python_argv("gameday.lab.trainer", "--dir", root, "--port",
                        str(layout.trainer_port), "--parent-pid", me),
            layout.trainer_url, layout.trainer_url + "/healthz"))

    def mount_store(self) -> None:
        """(Re)mount ``DIR/store`` on the fault filesystem; it dies with the supervisor."""
        try:
            self.store.start(preexec=parent_death_preexec())
            self.store.wait_mounted()
        except ControlError as exc:
            raise LabError(str(exc)) from None
        log.info("store_mounted", mountpoint=str(self.paths.store), pid=_store_pid(self))

    def _start(self, child: Child) -> None:
        env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1",
               "PYTHONUNBUFFERED": "1"}
        child.popen = spawn(child.argv, log_path=self.paths.log(child.name), env=env,
                            preexec=parent_death_preexec() if child.preexec else None)
        child.restart_at = None
        log.info("process_started", name=child.name, pid=child.popen.pid)

    # -- readiness --------------------------------------------------------------------

    def wait_ready(self, timeout_s: float) -> None:
        """Return once the lab is ready; raise :class:`StartupFailed` otherwise."""
        deadline = self.clock.monotonic() + timeout_s
        waiting = "the processes to answer"
        while True:
            for child in self.children:
                code = child.popen.poll() if child.popen else None
                if code is not None:
                    raise StartupFailed(f"{child.name} exited with code {code} while starting",
                                        self.paths.log(child.name))
            waiting = self._not_ready() or ""
            self._note_startup(waiting.partition(" (")[0] or None)
            if not waiting:
                return
            if self.stop.is_set():
                raise StartupFailed("stopped by a signal while starting")
            if self.clock.monotonic() > deadline:
                raise StartupFailed(f"not ready within {timeout_s:g}s: waiting for {waiting}",
                                    self._log_of(waiting))
            self.stop.wait(0.1)

    def _note_startup(self, waiting_for: str | None) -> None:
        """Keep when the start-up began to wait for ``waiting_for`` (None: nothing more,
        ready), once per change: ``lab.json``'s ``startup``, where its time goes."""
        if not self.startup or self.startup[-1]["waiting_for"] != waiting_for:
            self.startup.append({"at_s": round(self.clock.now() - self.started_at, 3),
                                 "waiting_for": waiting_for})

    def _log_of(self, waiting: str) -> Path | None:
        for child in self.children:
            if waiting.startswith(child.name):
                return self.paths.log(child.name)
        return None

    def _not_ready(self) -> str | None:
        """What the lab still waits for, or ``None`` when it is ready."""
        for child in self.children:
            if child.health_url and not _answers(child.health_url):
                return f"{child.name} ({child.health_url})"
        status, body = _request("GET", self.layout.controller_url + "/healthz")
        if status != 200 or body.get("serving") != self.shape.shards:
            return f"controller to serve every shard ({body.get('serving', 0)} serving)"
        spec = ModelSpec(shards=self.shape.shards)
        sample = [[(i + 1) / spec.d_in for i in range(spec.d_in)]]
        status, body = _request("POST", self.layout.router_url + "/predict", {"inputs": sample})
        if status != 200:
            return f"router to answer /predict ({body.get('error', status)})"
        health = prometheus.targets_health(self.layout.prometheus_url)
        expected = prometheus.expected_targets(self.layout)
        if health is None or health.total == 0:  # its discovery not yet applied
            return f"prometheus to list its targets ({'no answer' if health is None else 0})"
        if not health.all_up(expected):
            return f"prometheus to scrape all {expected} targets ({health.to_json()})"
        return None

    # -- lab.json ---------------------------------------------------------------------

    def lab_document(self) -> dict[str, Any]:
        layout = self.layout
        by_name = {c.name: c for c in self.children}
        nodes = [{"name": n.name, "agent_url": n.agent_url,
                  "exporter_url": n.exporter_url + "/metrics", "pid": _pid(by_name[n.name])}
                 for n in layout.nodes]
        processes = [{"name": "supervisor", "role": "supervisor", "pid": os.getpid(),
                      "url": None}]
        processes += [{"name": c.name, "role": c.role, "pid": _pid(c), "url": c.url}
                      for c in self.children]
        processes.append({"name": "store", "role": "storage", "pid": _store_pid(self),
                          "url": None})
        return {
            "version": LAB_JSON_VERSION,
            "dir": str(self.paths.root),
            "status": "ready",
            "supervisor_pid": os.getpid(),
            "pgid": os.getpgid(0),
            "started_at": self.started_at,
            "ready_at": self.ready_at,
            "startup": self.startup,
            "shape": self.shape.to_json(),
            "token_file": str(self.paths.token),
            "service_url": layout.router_url,
            "prometheus_url": layout.prometheus_url,
            "controller_url": layout.controller_url,
            "placement_url": layout.controller_url + "/placement",
            "trainer_url": layout.trainer_url,
            "nodes": nodes,
            "processes": processes,
        }

    def publish(self) -> None:
        write_json_atomic(self.paths.lab_json, self.lab_document())

    # -- life -------------------------------------------------------------------------

    def run(self, timeout_s: float) -> int:
        for child in self.children:
            self._start(child)
        try:
            self.wait_ready(timeout_s)
        except StartupFailed as exc:
            log.error("startup_failed", error=str(exc))
            write_json_atomic(self.paths.startup_error, {
                "message": str(exc), "log": str(exc.log_path) if exc.log_path else None})
            self.shutdown()
            return 1
        self.ready_at = self.clock.now()
        self.publish()
        log.info("lab_ready", seconds=round(self.ready_at - self.started_at, 3),
                 shape=str(self.shape))
        self.watch()
        self.shutdown()
        return 0

    def watch(self) -> None:
        """Restart processes that exit, until asked to stop."""
        while not self.stop.wait(0.2):
            changed = self._keep_store_mounted()
            for child in self.children:
                if child.popen is None or child.popen.poll() is None:
                    continue
                now = self.clock.monotonic()
                if child.restart_at is None:
                    delay = min(10.0, 0.5 * 2 ** child.restarts)
                    child.restart_at = now + delay
                    log.warning("process_exited", name=child.name,
                                code=child.popen.returncode, restart_in_s=delay)
                elif now >= child.restart_at:
                    child.restarts += 1
                    self._start(child)
                    changed = True
            if changed:
                self.publish()

    def _keep_store_mounted(self) -> bool:
        popen = self.store.popen
        if popen is None or popen.poll() is None:
            return False
        log.warning("store_exited", code=popen.returncode)
        try:
            self.mount_store()
        except LabError as exc:
            log.error("store_remount_failed", error=str(exc))
        return True

    def shutdown(self) -> None:
        """Stop the controller (and shards), then the router, nodes, Prometheus."""
        self.paths.lab_json.unlink(missing_ok=True)
        for roles in (("controller", "trainer"), ("router",), ("node",), ("prometheus",)):
            stop_processes([c.popen for c in self.children
                            if c.role in roles and c.popen is not None], timeout_s=5.0)
            if roles == ("node",):  # agents reverted their faults: nothing is held now
                self.store.stop()
        log.info("lab_stopped")


def _store_pid(supervisor: Supervisor) -> int | None:
    return supervisor.store.popen.pid if supervisor.store.popen is not None else None


def _pid(child: Child) -> int | None:
    return child.popen.pid if child.popen is not None else None


def _request(method: str, url: str, body: Any = None) -> tuple[int, dict[str, Any]]:
    try:
        status, answer = fetch_json(method, url, body, timeout=2.0)
    except OSError as exc:
        return 0, {"error": str(exc)}
    return status, answer if isinstance(answer, dict) else {}


def _answers(url: str) -> bool:
    try:
        status, _ = fetch_json("GET", url, timeout=1.0)
    except OSError:
        return False
    return status == 200


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gameday.lab.supervisor")
    parser.add_argument("--dir", type=Path, required=True)
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--gpus-per-node", type=int, default=4)
    parser.add_argument("--shards", type=int, default=6)
    parser.add_argument("--timeout", type=float, default=30.0)
    args = parser.parse_args(argv)
    configure_logging("supervisor")
    paths = LabPaths(args.dir.resolve())
    paths.supervisor_json.parent.mkdir(parents=True, exist_ok=True)
    lock_fd = os.open(paths.lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        write_json_atomic(paths.startup_error, {
            "message": f"another lab supervisor holds {paths.lock}", "log": None})
        return 1
    shape = Shape(args.nodes, args.gpus_per_node, args.shards)
    supervisor = Supervisor(paths, shape)
    write_json_atomic(paths.supervisor_json, {"pid": os.getpid(), "pgid": os.getpgid(0),
                                              "started_at": supervisor.started_at,
                                              "shape": shape.to_json()})

    def request_stop(signum: int, _frame: FrameType | None) -> None:
        supervisor.stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, request_stop)
    try:
        shape.check()
        supervisor.prepare()
    except (LabError, OSError) as exc:
        write_json_atomic(paths.startup_error, {"message": str(exc), "log": None})
        supervisor.store.stop()
        paths.supervisor_json.unlink(missing_ok=True)
        return 1
    try:
        return supervisor.run(args.timeout)
    finally:
        supervisor.store.stop()
        paths.supervisor_json.unlink(missing_ok=True)
        os.close(lock_fd)


if __name__ == "__main__":
    sys.exit(main())
