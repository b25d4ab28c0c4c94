"""``gameday lab up|status|down`` as functions.

``up`` starts a detached supervisor (:mod:`gameday.lab.supervisor`) and returns the lab's
discovery document ``DIR/lab.json`` once the lab is ready (docs/lab.md has the
contract); ``status`` adds live health; ``down`` stops everything and leaves no
process, port or lock behind, even when the supervisor was killed.
"""

import contextlib
import fcntl
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from gameday.clock import SYSTEM_CLOCK, Clock
from gameday.contract.gpus import gpu_label
from gameday.errors import AgentError, LabError, LabSettingError
from gameday.lab.files import read_json
from gameday.lab.hostfaults import remove_lab_cgroups
from gameday.lab.httpjson import fetch_json
from gameday.lab.layout import LabPaths, Shape
from gameday.lab.proc import group_members, pid_alive, process_cmdline
from gameday.lab.storage import unmount_leftovers

__all__ = ["default_lab_dir", "down", "format_status", "status", "up"]

LAB_DIR_ENV = "GAMEDAY_LAB_DIR"

# Supervisors started by this process, reaped by ``down`` (no zombies left behind).
_launched: list[subprocess.Popen[bytes]] = []


def default_lab_dir() -> Path:
    """``$GAMEDAY_LAB_DIR``, else ``./.gameday/lab`` (absolute)."""
    return Path(os.environ.get(LAB_DIR_ENV) or ".gameday/lab").absolute()


@contextlib.contextmanager
def _flocked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _lock_held(path: Path) -> bool:
    """Whether some process holds an exclusive ``flock`` on ``path``."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def _lab_info(paths: LabPaths) -> dict[str, Any] | None:
    info = read_json(paths.lab_json)
    return info if isinstance(info, dict) and info.get("version") == 1 else None


def running(dir: Path) -> bool:
    """Whether a lab's supervisor holds ``dir`` (ready or still starting)."""
    return _lock_held(LabPaths(dir.absolute()).lock)


def _shape_of(info: dict[str, Any]) -> Shape:
    return Shape.from_json(info["shape"])


def up(dir: Path, nodes: int = 2, gpus_per_node: int = 4, shards: int = 6,
       timeout_s: float = 30.0, *, clock: Clock = SYSTEM_CLOCK) -> dict[str, Any]:
    """Start a lab in ``dir`` (or reuse the one running there with the same shape) and
    return its ``lab.json`` once ready. Raises :class:`LabError` (one line, then the tail
    of the failing process's log) when it cannot."""
    from gameday.lab.prometheus import prometheus_binary

    shape = Shape(nodes, gpus_per_node, shards)
    shape.check()
    prometheus_binary()
    paths = LabPaths(dir.absolute())
    paths.root.mkdir(parents=True, exist_ok=True)
    with _flocked(paths.up_lock):
        info = _wait_running(paths, clock, timeout_s)
        if info is not None:
            running = _shape_of(info)
            if running != shape:
                raise LabSettingError(f"a lab with {running} already runs in {paths.root}; "
                                      f"run `gameday lab down` first")
            return info
        down(paths.root, timeout_s=5.0, clock=clock)  # leftovers of a lab that died
        return _start(paths, shape, clock, timeout_s)


def _wait_running(paths: LabPaths, clock: Clock, timeout_s: float) -> dict[str, Any] | None:
    """The lab.json of the supervisor holding the lock, once it is ready; ``None`` when no
    supervisor holds it (none runs, or the one there stopped)."""
    deadline = clock.monotonic() + timeout_s
    while True:
        if not _lock_held(paths.lock):
            return None
        info = _lab_info(paths)
        if info is not None:
            return info
        if clock.monotonic() > deadline:
            raise LabError(f"a lab in {paths.root} is starting but not ready after "
                           f"{timeout_s:g}s; see {paths.logs}")
        clock.sleep(0.05)


def _start(paths: LabPaths, shape: Shape, clock: Clock, timeout_s: float) -> dict[str, Any]:
    paths.startup_error.unlink(missing_ok=True)
    paths.logs.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "gameday.lab.supervisor", "--dir", str(paths.root),
            "--nodes", str(shape.nodes), "--gpus-per-node", str(shape.gpus_per_node),
            "--shards", str(shape.shards), "--timeout", str(timeout_s)]
    with open(paths.log("supervisor"), "ab") as log:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True,
                                close_fds=True)
    _launched.append(proc)
    deadline = clock.monotonic() + timeout_s + 10.0
    while True:
        info = _lab_info(paths)
        if info is not None and info.get("supervisor_pid") == proc.pid:
            return info
        if proc.poll() is not None:
            raise _startup_error(paths, proc.returncode)
        if clock.monotonic() > deadline:
            down(paths.root)
            raise LabError(f"the lab in {paths.root} was not ready within {timeout_s:g}s; "
                           f"see {paths.logs}")
        clock.sleep(0.05)


def _startup_error(paths: LabPaths, code: int | None) -> LabError:
    report = read_json(paths.startup_error)
    if isinstance(report, dict):
        message = str(report.get("message"))
        log = Path(report["log"]) if report.get("log") else paths.log("supervisor")
    else:
        message = f"the supervisor exited with code {code}"
        log = paths.log("supervisor")
    tail = _tail(log)
    text = f"the lab in {paths.root} did not start: {message} (log: {log})"
    if tail:
        text += "\n" + "\n".join("  " + line for line in tail)
    return LabError(text)


def _tail(path: Path, lines: int = 8) -> list[str]:
    try:
        content = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []
    return [line[:300] for line in content[-lines:]]


def status(dir: Path) -> dict[str, Any]:
    """``lab.json`` plus live health: each process ``alive``/``healthy``, each node's
    active faults, the placement and Prometheus' targets; ``status`` is ``"ready"`` when
    everything is healthy and every shard serves, else ``"degraded"``."""
    paths = LabPaths(dir.absolute())
    info = _lab_info(paths)
    if info is None:
        raise LabError(f"no lab runs in {paths.root}; start one with `gameday lab up`")
    result = dict(info)
    token = paths.read_token()
    healthy = pid_alive(int(info["supervisor_pid"]))
    processes = []
    for proc in info["processes"]:
        entry = dict(proc)
        entry["alive"] = pid_alive(int(proc["pid"]))
        entry["healthy"] = entry["alive"] and _healthy(proc)
        healthy = healthy and entry["healthy"]
        processes.append(entry)
    result["processes"] = processes
    nodes = []
    for node in info["nodes"]:
        entry = dict(node)
        entry["alive"] = pid_alive(int(node["pid"]))
        entry["faults"], entry["faults_error"] = _agent_faults(node["agent_url"], token)
        nodes.append(entry)
    result["nodes"] = nodes
    try:
        code, placement = fetch_json("GET", info["placement_url"], timeout=2.0)
    except OSError as exc:
        code, placement = 0, {"error": str(exc)}
    result["placement"] = placement if code == 200 else None
    serving = isinstance(placement, dict) and code == 200 and all(
        s.get("status") == "serving" for s in placement.get("shards", []))
    from gameday.lab.prometheus import targets_health

    targets = targets_health(info["prometheus_url"], timeout=2.0)
    result["prometheus_targets"] = targets.to_json() if targets else None
    targets_up = targets is not None and targets.up == targets.total > 0
    result["status"] = "ready" if healthy and serving and targets_up else "degraded"
    return result


def format_status(report: dict[str, Any], *, events: int = 8) -> str:
    """A terminal view of :func:`status`'s report."""

    def clock(t: float | None) -> str:
        return time.strftime("%H:%M:%S", time.localtime(t)) if t else "-"

    shape = report["shape"]
    ready_in = (report["ready_at"] or 0) - report["started_at"]
    targets = report.get("prometheus_targets") or {}
    lines = [
        f"lab in {report['dir']}: {report['status']} "
        f"({shape['nodes']}x{shape['gpus_per_node']}/{shape['shards']}), "
        f"up since {clock(report['started_at'])} (ready in {ready_in:.1f} s)",
        f"  service     {report['service_url']}/predict",
        f"  prometheus  {report['prometheus_url']} "
        f"(targets {targets.get('up', '?')}/{targets.get('total', '?')} up)",
        f"  placement   {report['placement_url']}",
        "processes:",
    ]
    for proc in report["processes"]:
        health = "healthy" if proc.get("healthy") else "UNHEALTHY"
        state = health if proc.get("alive") else "DEAD"
        lines.append(f"  {proc['name']:<12} pid {proc['pid']:<8} {state:<10} "
                     f"{proc.get('url') or ''}".rstrip())
    lines.append("faults:")
    faults = [(node["name"], f) for node in report["nodes"] for f in node.get("faults", [])]
    for node in report["nodes"]:
        if node.get("faults_error"):
            lines.append(f"  {node['name']}: cannot ask its agent: {node['faults_error']}")
    for name, fault in faults:
        target = ",".join(f"{k}={v}" for k, v in fault.get("target", {}).items())
        lines.append(f"  {name} {fault['kind']} {target} {fault['id']} "
                     f"(lease until {clock(fault.get('expires_at'))})")
    if not faults:
        lines.append("  none active")
    placement = report.get("placement")
    if placement is None:
        lines.append("placement: the controller does not answer")
        return "\n".join(lines)
    lines.append("shards:")
    for shard in placement["shards"]:
        where = gpu_label(shard["node"], shard["gpu"]) if shard["node"] is not None else "-"
        lines.append(f"  {shard['shard']:<3} {where:<12} {shard['status']:<9} "
                     f"pid {shard['pid'] or '-'}")
    cordoned = [gpu_label(g["node"], g["gpu"]) for g in placement["gpus"]
                if g["state"] == "cordoned"]
    spares = [gpu_label(g["node"], g["gpu"]) for g in placement["gpus"]
              if g["state"] == "healthy" and not g["shards"]]
    lines.append(f"gpus: {len(placement['gpus'])}, cordoned: {', '.join(cordoned) or 'none'}, "
                 f"spare: {', '.join(spares) or 'none'}")
    recent = placement["events"][-events:]
    if recent:
        lines.append(f"events (last {len(recent)}):")
    for event in recent:
        where = gpu_label(event["node"], event["gpu"])
        extra = ""
        if "to" in event:
            to = event["to"]
            extra = f" shard {event.get('shard')} -> {gpu_label(to['node'], to['gpu'])}"
        elif event.get("alert"):
            extra = f" {event['alert']}"
        lines.append(f"  {clock(event['t'])} {event['type']:<15} {where}{extra}")
    return "\n".join(lines)


def _healthy(proc: dict[str, Any]) -> bool:
    url = proc.get("url")
    if not url:
        return True
    path = "/-/healthy" if proc.get("role") == "prometheus" else "/healthz"
    try:
        code, _ = fetch_json("GET", url + path, timeout=2.0)
    except OSError:
        return False
    return code == 200


def _agent_faults(url: str, token: str) -> tuple[list[dict[str, Any]], str | None]:
    from gameday.wire.agent_client import AgentClient

    try:
        with AgentClient(url, token, timeout_s=2.0) as client:
            return client.faults(), None
    except AgentError as exc:
        return [], str(exc)


def down(dir: Path, timeout_s: float = 10.0, *, clock: Clock = SYSTEM_CLOCK) -> None:
    """Stop the lab in ``dir``: SIGTERM to the supervisor (it stops every process; agents
    revert their faults), then after ``timeout_s`` SIGKILL to whatever is left of the
    lab's process group, then a lazy unmount of any FUSE mount left under ``dir`` (the
    store). Works when the supervisor is gone; a no-op when no lab runs."""
    paths = LabPaths(dir.absolute())
    info = _lab_info(paths) or read_json(paths.supervisor_json)
    if isinstance(info, dict):
        supervisor = int(info.get("supervisor_pid") or info.get("pid") or 0)
        pgid = int(info.get("pgid") or 0)
        if pgid > 0 and _ours(pgid, paths):
            if pid_alive(supervisor):
                _signal(supervisor, signal.SIGTERM)
            else:
                for pid in group_members(pgid):
                    _signal(pid, signal.SIGTERM)
            if not _wait_gone(pgid, clock, timeout_s):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pgid, signal.SIGKILL)
                _wait_gone(pgid, clock, 5.0)
    _reap()
    left = unmount_leftovers(paths.root)  # the store of a supervisor killed with -9
    remove_lab_cgroups(paths)  # hogs' groups of nodes killed with -9
    if left:
        raise LabError(f"{left[0]} is still mounted after `down`; unmount it with "
                       f"`fusermount3 -uz {left[0]}`")
    for path in (paths.lab_json, paths.supervisor_json):
        path.unlink(missing_ok=True)
    deadline = clock.monotonic() + 5.0
    while _lock_held(paths.lock):
        if clock.monotonic() > deadline:
            raise LabError(f"{paths.lock} is still locked after `down`; a process outside "
                           "the lab's process group holds it")
        clock.sleep(0.05)


def _ours(pgid: int, paths: LabPaths) -> bool:
    """Whether process group ``pgid`` is still this lab's (some member names its dir)."""
    root = str(paths.root)
    return any(root in process_cmdline(pid) for pid in group_members(pgid))


def _signal(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


def _wait_gone(pgid: int, clock: Clock, timeout_s: float) -> bool:
    deadline = clock.monotonic() + timeout_s
    while group_members(pgid):
        _reap()
        if clock.monotonic() > deadline:
            return False
        clock.sleep(0.05)
    return True


def _reap() -> None:
    for proc in list(_launched):
        if proc.poll() is not None:
            _launched.remove(proc)
