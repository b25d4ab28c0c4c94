"""A torchrun DDP job (``bench/ddp_job.py``) with its two ranks in two network namespaces
joined by a veth, so that the collective's traffic crosses a real link; and the job's
own step timer read back.

Used by ``bench/ddp_latency.py`` and ``tests/workloads/test_ddp_latency.py``.
"""

import bisect
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

__all__ = ["LOG_PATTERN", "DdpJob", "StepTimer", "ddp_job"]

JOB = Path(__file__).with_name("ddp_job.py")
#: The job log's lines as ``verifiers.throughput.degradation`` reads them.
LOG_PATTERN = r"^(?P<t>[\d.]+) step=(?P<step>\d+)"


@dataclass(frozen=True)
class StepTimer:
    """The job's own step timer: each step's end (unix time) and duration."""

    ends: list[float]
    took: list[float]

    @staticmethod
    def read(path: Path) -> "StepTimer":
        rows = [line.split() for line in path.read_text().splitlines() if line.count(" ") == 2]
        return StepTimer([float(r[1]) for r in rows], [float(r[2]) for r in rows])

    def rate(self, start: float, end: float) -> float:
        """Steps per second ended in ``[start, end]``, by the job's own clock."""
        lo, hi = bisect.bisect_left(self.ends, start), bisect.bisect_right(self.ends, end)
        return (hi - lo) / (end - start)


@dataclass
class DdpJob:
    log: Path
    truth: Path
    ranks: list[subprocess.Popen[bytes]]

    def steps(self) -> int:
        return len(self.log.read_text().splitlines()) if self.log.exists() else 0

    def wait_steps(self, count: int, timeout_s: float = 90.0) -> None:
        deadline = time.monotonic() + timeout_s
        while self.steps() < count:
            dead = [r.returncode for r in self.ranks if r.poll() is not None]
            if dead or time.monotonic() > deadline:
                raise RuntimeError(f"the DDP job made {self.steps()} steps of {count} "
                                   f"(ranks exited: {dead})")
            time.sleep(0.1)

    def timer(self) -> StepTimer:
        return StepTimer.read(self.truth)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def ddp_job(ns_a: str, link_a: str, ip_a: str, ns_b: str, link_b: str,
            workdir: Path) -> Iterator[DdpJob]:
    """Rank 0 (and the rendezvous) in ``ns_a``, rank 1 in ``ns_b``; stopped after."""
    log, truth = workdir / "ddp.log", workdir / "ddp-truth.txt"
    port = _free_port()
    ranks = []
    try:
        for rank, (ns, link) in enumerate(((ns_a, link_a), (ns_b, link_b))):
            ranks.append(subprocess.Popen(
                ["ip", "netns", "exec", ns, "env", f"GLOO_SOCKET_IFNAME={link}",
                 "OMP_NUM_THREADS=1", sys.executable, "-m", "torch.distributed.run",
                 "--nnodes", "2", "--nproc-per-node", "1", "--node-rank", str(rank),
                 "--master-addr", ip_a, "--master-port", str(port), str(JOB), str(log),
                 str(truth)],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        yield DdpJob(log, truth, ranks)
    finally:
        _stop(ranks, str(log))


def _stop(ranks: list[subprocess.Popen[bytes]], marker: str) -> None:
    """torchrun forwards SIGTERM to its workers (each in a session of its own) and
    exits; whatever still runs with ``marker`` on its command line is then killed."""
    for proc in ranks:
        with contextlib.suppress(ProcessLookupError):
            proc.terminate()
    for proc in ranks:
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            if marker in (entry / "cmdline").read_bytes().decode(errors="replace"):
                os.kill(int(entry.name), signal.SIGKILL)
