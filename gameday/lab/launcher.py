"""How the controller starts shard processes (a seam, so its logic is tested without them).

:class:`ProcessShardLauncher` runs ``python -m gameday.lab.shard`` in the lab's process
group, tied to the controller (it dies with it), with one BLAS thread. A shard is ready
once it wrote its ready file and answers ``/healthz``.
"""

import contextlib
import os
import signal
import subprocess
import uuid
from pathlib import Path
from typing import Protocol

from gameday.lab.files import read_json
from gameday.lab.httpjson import fetch_json
from gameday.lab.layout import LabPaths
from gameday.lab.proc import python_argv, spawn

__all__ = ["ProcessShard", "ProcessShardLauncher", "ShardHandle", "ShardLauncher"]


class ShardHandle(Protocol):
    """One started shard process."""

    @property
    def pid(self) -> int: ...

    def poll(self) -> int | None:
        """Its exit code, ``None`` while it runs."""
        ...

    def ready_url(self) -> str | None:
        """Its URL once it serves and answers ``/healthz``; ``None`` until then."""
        ...

    def terminate(self) -> None: ...

    def kill(self) -> None: ...


class ShardLauncher(Protocol):
    def launch(self, shard: int, node: str, gpu: int) -> ShardHandle: ...


class ProcessShard:
    def __init__(self, popen: subprocess.Popen[bytes], ready_file: Path) -> None:
        self._popen = popen
        self._ready_file = ready_file
        self._url: str | None = None

    @property
    def pid(self) -> int:
        return self._popen.pid

    def poll(self) -> int | None:
        code = self._popen.poll()
        if code is not None:
            with contextlib.suppress(OSError):
                self._ready_file.unlink()
        return code

    def ready_url(self) -> str | None:
        if self._url is None:
            info = read_json(self._ready_file)
            if isinstance(info, dict) and isinstance(info.get("url"), str):
                self._url = info["url"]
        if self._url is None:
            return None
        try:
            status, _ = fetch_json("GET", self._url + "/healthz", timeout=0.5)
        except OSError:
            return None
        return self._url if status == 200 else None

    def terminate(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self._popen.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self._popen.kill()


class ProcessShardLauncher:
    """Starts shard processes for the lab in ``paths``."""

    def __init__(self, paths: LabPaths) -> None:
        self.paths = paths
        self._env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1",
                     "MKL_NUM_THREADS": "1"}

    def launch(self, shard: int, node: str, gpu: int) -> ProcessShard:
        ready = self.paths.shard_run / f"shard-{shard}-{uuid.uuid4().hex[:8]}.json"
        ready.parent.mkdir(parents=True, exist_ok=True)
        argv = python_argv("gameday.lab.shard", "--dir", str(self.paths.root),
                           "--shard", str(shard), "--node", node, "--gpu", str(gpu),
                           "--port", "0", "--ready-file", str(ready),
                           "--parent-pid", str(os.getpid()))
        popen = spawn(argv, log_path=self.paths.log(f"shard-{shard}"), env=self._env)
        return ProcessShard(popen, ready)
