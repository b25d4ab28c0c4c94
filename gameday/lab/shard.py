"""A shard server: one model shard on one virtual GPU.

``python -m gameday.lab.shard --dir DIR --shard I --node NODE --gpu G [--port 0]
[--ready-file F] [--parent-pid PID]``

``POST /partial {"inputs": [[d_in floats], ...]}`` answers
``{"partial": [[d_out floats], ...], "shard": I}``; ``GET /healthz``. Weights come from
the store (``DIR/store/shard-I.npz``). Before each request the shard looks at its GPU's
published state (a ``stat``; re-read only when replaced) and behaves as a process on
that GPU would:

- double-bit ECC errors since the shard started, or Xid 48/94/95: HTTP 500
  ``{"error": "uncorrectable ECC error (Xid 48) on node-0/gpu0"}``;
- GPU not present, or Xid 79: HTTP 500;
- weights corrupted: the in-memory weights are perturbed (deterministically) and the
  shard keeps answering, wrongly and silently; once cleared, it reloads from the store.

Once serving, it writes ``{"url", "pid", ...}`` to the ready file (atomically). Its
starter sets ``OPENBLAS_NUM_THREADS=1``: one BLAS thread, deterministic sums.
"""

import argparse
import os
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import Any

import numpy as np
import structlog

from gameday.lab.files import write_json_atomic
from gameday.lab.gpustate import GpuState, GpuStateWatcher, gpu_state_path
from gameday.lab.httpjson import (
    JsonServer,
    Request,
    Response,
    error_response,
    json_response,
)
from gameday.lab.layout import LabPaths
from gameday.lab.logs import configure_logging
from gameday.lab.model import ShardWeights, load_shard, load_spec
from gameday.lab.proc import tie_to_parent

__all__ = ["ShardServer", "gpu_fault", "main"]

log = structlog.get_logger("gameday.lab.shard")

#: Xids after which a process on the GPU cannot go on.
FATAL_ECC_XIDS = (48, 94, 95)
XID_FALLEN_OFF_BUS = 79
MAX_BATCH = 4096


def gpu_fault(state: GpuState | None, baseline_dbe: int, label: str) -> str | None:
    """Why a process on this GPU fails now (one line), or ``None`` when it can run."""
    if state is None:
        return f"GPU {label} is unavailable (no state published; is its node down?)"
    if not state.present or state.last_xid == XID_FALLEN_OFF_BUS:
        return f"GPU has fallen off the bus (Xid 79) on {label}"
    if state.last_xid in FATAL_ECC_XIDS:
        return f"uncorrectable ECC error (Xid {state.last_xid}) on {label}"
    if state.ecc_dbe_total > baseline_dbe:
        return f"uncorrectable ECC error (Xid 48) on {label}"
    return None


class ShardServer:
    """The shard's weights, following its GPU's state."""

    def __init__(self, paths: LabPaths, shard: int, node: str, gpu: int) -> None:
        self.paths = paths
        self.shard = shard
        self.node = node
        self.gpu = gpu
        self.label = f"{node}/gpu{gpu}"
        self.d_in = load_spec(paths.store).d_in
        self._watcher = GpuStateWatcher(gpu_state_path(paths.node_dir(node), gpu))
        self._lock = threading.Lock()
        self._weights = load_shard(paths.store, shard)
        self._corrupted = False
        start = self._watcher.current()
        self._baseline_dbe = start.ecc_dbe_total if start is not None else 0
        self._follow(start)

    def _follow(self, state: GpuState | None) -> None:
        corrupted = state is not None and state.weights_corrupted
        if corrupted and not self._corrupted:
            self._weights = self._weights.corrupted()
            log.warning("weights_corrupted", shard=self.shard, gpu=self.label)
        elif self._corrupted and not corrupted:
            self._weights = load_shard(self.paths.store, self.shard)
            log.info("weights_reloaded", shard=self.shard, gpu=self.label)
        self._corrupted = corrupted

    def check(self) -> tuple[ShardWeights | None, str | None]:
        """The weights to compute with, or why this GPU cannot compute now."""
        with self._lock:
            state = self._watcher.current()
            fault = gpu_fault(state, self._baseline_dbe, self.label)
            if fault is not None:
                return None, fault
            self._follow(state)
            return self._weights, None

    def partial(self, request: Request) -> Response:
        try:
            body = request.json()
            x = np.asarray(body["inputs"], dtype=np.float64)
        except (ValueError, TypeError, KeyError):
            return error_response(400, 'body must be {"inputs": [[numbers], ...]}')
        if x.ndim != 2 or x.shape[1] != self.d_in or not 1 <= x.shape[0] <= MAX_BATCH:
            return error_response(400, f"inputs must be 1..{MAX_BATCH} rows of {self.d_in} "
                                       f"numbers, got shape {list(x.shape)}")
        weights, fault = self.check()
        if weights is None:
            return error_response(500, fault or "unavailable")
        return json_response(200, {"partial": weights.partial(x).tolist(), "shard": self.shard})

    def healthz(self, _: Request) -> Response:
        weights, fault = self.check()
        if weights is None:
            return error_response(500, fault or "unavailable")
        return json_response(200, self.describe())

    def describe(self) -> dict[str, Any]:
        return {"ok": True, "shard": self.shard, "node": self.node, "gpu": self.gpu,
                "pid": os.getpid()}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gameday.lab.shard")
    parser.add_argument("--dir", type=Path, required=True)
    parser.add_argument("--shard", type=int, required=True)
    parser.add_argument("--node", required=True)
    parser.add_argument("--gpu", type=int, required=True)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--ready-file", type=Path)
    parser.add_argument("--parent-pid", type=int)
    args = parser.parse_args(argv)
    tie_to_parent(args.parent_pid)
    configure_logging(f"shard-{args.shard}")
    stop = threading.Event()

    def request_stop(signum: int, _frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    shard = ShardServer(LabPaths(args.dir), args.shard, args.node, args.gpu)
    server = JsonServer({("POST", "/partial"): shard.partial,
                         ("GET", "/healthz"): shard.healthz},
                        port=args.port, on_error=lambda exc: log.exception("handler_error"))
    server.start()
    if args.ready_file is not None:
        write_json_atomic(args.ready_file, {"url": server.url, **shard.describe()})
    log.info("shard_serving", url=server.url, shard=args.shard, gpu=shard.label)
    stop.wait()
    server.stop()
    log.info("shard_stopped", shard=args.shard)
    return 0


if __name__ == "__main__":
    sys.exit(main())
