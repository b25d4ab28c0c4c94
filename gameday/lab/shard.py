"""A shard server: one model shard on one virtual GPU.

``python -m gameday.lab.shard --dir DIR --shard I --node NODE --gpu G [--port 0]
[--ready-file F] [--parent-pid PID]``

``POST /partial {"inputs": [[d_in floats], ...]}`` answers
``{"partial": [[d_out floats], ...], "shard": I}``; ``GET /healthz``. Weights come from
the store (``DIR/store/shard-I.npz``). Before each request the shard looks at its GPU's
published state (its entry in the node's ``gpus.json``: a ``stat``; re-read only when
replaced) and behaves as a process on that GPU would:

- double-bit ECC errors since the shard started, or Xid 48/94/95: HTTP 500
  ``{"error": "uncorrectable ECC error (Xid 48) on node-0/gpu0"}``;
- GPU not present, or Xid 79: HTTP 500;
- weights corrupted: the in-memory weights are perturbed (deterministically) and the
  shard keeps answering, wrongly and silently; once cleared, it reloads from the store;
- less than ``SHARD_ALLOCATION_MIB`` of device memory free (``gpu.oom``): the next
  allocation fails, HTTP 500 ``{"error": "CUDA out of memory: ..."}``, and the process
  exits with code 1 (a crashed inference server); at start it exits before serving;
- clocks held down (``gpu.thermal``): each answer takes longer, as the request's device
  time (``MODEL_DEVICE_MS`` at full clock) would at the lower clock: the shard sleeps
  ``MODEL_DEVICE_MS * (max_clock / clock - 1)`` ms after computing.

Once serving, it writes ``{"url", "pid", ...}`` to the ready file (atomically). Its
starter sets ``OPENBLAS_NUM_THREADS=1``: one BLAS thread, deterministic sums.
"""

import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import structlog

from gameday.contract.gpus import gpu_label
from gameday.lab.files import write_json_atomic
from gameday.lab.gpustate import SM_CLOCK_MHZ, GpuState, GpuStateWatcher, node_state_path
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
from gameday.lab.proc import lab_parser, stop_on_signals, tie_to_parent

__all__ = ["ShardOutOfMemory", "ShardServer", "gpu_fault", "main", "out_of_memory",
           "throttle_delay_s"]

log = structlog.get_logger("gameday.lab.shard")

#: Xids after which a process on the GPU cannot go on.
FATAL_ECC_XIDS = (48, 94, 95)
XID_FALLEN_OFF_BUS = 79
MAX_BATCH = 4096
#: Device memory a shard allocates for its weights at start, and for each request's
#: activations (virtual: it is not counted in the GPU's used memory).
SHARD_ALLOCATION_MIB = 2048
#: The modelled device time of one request at full SM clock. The lab does not sleep for
#: it (the numpy compute stands in), only for what a lower clock adds to it.
MODEL_DEVICE_MS = 50.0


class ShardOutOfMemory(Exception):
    """The shard's allocation failed: the GPU has too little free memory."""


def out_of_memory(state: GpuState | None, label: str,
                  need_mib: int = SHARD_ALLOCATION_MIB) -> str | None:
    """The CUDA out-of-memory error an allocation of ``need_mib`` gets now, or ``None``."""
    if state is None:
        return None
    free = state.memory_total_mib - state.memory_used_mib
    if free >= need_mib:
        return None
    return (f"CUDA out of memory: tried to allocate {need_mib} MiB on {label} "
            f"({free} MiB free of {state.memory_total_mib} MiB)")


def throttle_delay_s(state: GpuState | None) -> float:
    """How much longer a request takes on this GPU's current SM clock than at full clock."""
    if state is None or state.sm_clock_mhz <= 0 or state.sm_clock_mhz >= SM_CLOCK_MHZ:
        return 0.0
    return MODEL_DEVICE_MS * (SM_CLOCK_MHZ / state.sm_clock_mhz - 1.0) / 1000.0


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

    def __init__(self, paths: LabPaths, shard: int, node: str, gpu: int, *,
                 on_fatal: Callable[[str], None] = lambda reason: None,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.paths = paths
        self.shard = shard
        self.node = node
        self.gpu = gpu
        self.label = gpu_label(node, gpu)
        self.d_in = load_spec(paths.store).d_in
        self._watcher = GpuStateWatcher(node_state_path(paths.node_dir(node)), gpu)
        self._on_fatal = on_fatal
        self._sleep = sleep
        self._delay_s = 0.0
        self._lock = threading.Lock()
        self._weights = load_shard(paths.store, shard)
        self._corrupted = False
        start = self._watcher.current()
        oom = out_of_memory(start, self.label)
        if oom is not None:
            raise ShardOutOfMemory(oom)
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
            oom = out_of_memory(state, self.label)
            if oom is not None:
                self._on_fatal(oom)
                return None, oom
            self._follow(state)
            self._delay_s = throttle_delay_s(state)
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
        answer = json_response(200, {"partial": weights.partial(x).tolist(),
                                     "shard": self.shard})
        if self._delay_s > 0:
            self._sleep(self._delay_s)
        return answer

    def healthz(self, _: Request) -> Response:
        weights, fault = self.check()
        if weights is None:
            return error_response(500, fault or "unavailable")
        return json_response(200, self.describe())

    def describe(self) -> dict[str, Any]:
        return {"ok": True, "shard": self.shard, "node": self.node, "gpu": self.gpu,
                "pid": os.getpid()}


def main(argv: Sequence[str] | None = None) -> int:
    parser = lab_parser("gameday.lab.shard")
    parser.add_argument("--shard", type=int, required=True)
    parser.add_argument("--node", required=True)
    parser.add_argument("--gpu", type=int, required=True)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--ready-file", type=Path)
    args = parser.parse_args(argv)
    tie_to_parent(args.parent_pid)
    configure_logging(f"shard-{args.shard}")
    stop = stop_on_signals()
    fatal: list[str] = []

    def crash(reason: str) -> None:
        if not fatal:
            fatal.append(reason)
            log.error("shard_crashed", shard=args.shard, error=reason)
        stop.set()

    try:
        shard = ShardServer(LabPaths(args.dir), args.shard, args.node, args.gpu,
                            on_fatal=crash)
    except ShardOutOfMemory as exc:
        log.error("shard_start_failed", shard=args.shard, error=str(exc))
        return 1
    server = JsonServer({("POST", "/partial"): shard.partial,
                         ("GET", "/healthz"): shard.healthz},
                        port=args.port, on_error=lambda exc: log.exception("handler_error"))
    server.start()
    if args.ready_file is not None:
        write_json_atomic(args.ready_file, {"url": server.url, **shard.describe()})
    log.info("shard_serving", url=server.url, shard=args.shard, gpu=shard.label)
    stop.wait()
    if fatal:
        time.sleep(0.05)  # let the failing answer go out before the process dies
    server.stop()
    log.info("shard_stopped", shard=args.shard, crashed=bool(fatal))
    return 1 if fatal else 0


if __name__ == "__main__":
    sys.exit(main())
