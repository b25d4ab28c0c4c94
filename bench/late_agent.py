"""An agent that answers late, deterministically, for ``bench/fault_survival.py --mode
in-flight`` and the write-ahead tests (``tests/safety/test_safety_write_ahead.py``).

:class:`LateBackend` is the lab's virtual GPU backend (the stand-in for NVML: the only
GPUs here are virtual) whose ``apply`` blocks until the test releases it, so the real
orchestrator can be killed while its request is at the agent. :class:`HoldingProxy` is
a real TCP proxy in front of a real agent that holds every fault request
(``POST /v1/faults...``) until released, so the orchestrator can be killed while its
request has left it but not yet reached the agent.
"""

import contextlib
import socket
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gameday.contract.backend import FaultRequest
from gameday.lab.devices import VirtualGpuBackend

__all__ = ["HOLD", "HoldingProxy", "LateBackend", "experiment"]

#: A probe that holds the run for 30 s (a process: nothing of the tests is imported).
HOLD: dict[str, Any] = {"type": "probe", "name": "hold", "provider": {
    "type": "process", "path": "sleep", "arguments": "30"}}


class LateBackend(VirtualGpuBackend):
    """The virtual GPU backend; ``apply`` sets :attr:`arrived` and waits for
    :attr:`release` (at most ``hold_s`` seconds) before applying."""

    def __init__(self, node: str, state_dir: Path, *, gpus: int = 2,
                 hold_s: float = 60.0) -> None:
        super().__init__(node, state_dir, gpus=gpus)
        self.arrived = threading.Event()
        self.release = threading.Event()
        self.hold_s = hold_s

    def apply(self, fault_id: str, request: FaultRequest) -> dict[str, Any]:
        self.arrived.set()
        self.release.wait(self.hold_s)
        return super().apply(fault_id, request)


class HoldingProxy:
    """A TCP proxy on a free loopback port to ``upstream`` (``host:port``); a chunk from
    a client that starts a fault request (``POST /v1/faults``) sets :attr:`arrived` and
    is held (with all that follows on its connection) until :attr:`release` is set."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.arrived = threading.Event()
        self.release = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._closed = False
        self._sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        self._closed = True
        self.release.set()
        for sock in [self._listener, *self._sockets]:
            with contextlib.suppress(OSError):
                sock.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.upstream)
            self._sockets += [client, server]
            threading.Thread(target=self._pipe, args=(client, server, True),
                             daemon=True).start()
            threading.Thread(target=self._pipe, args=(server, client, False),
                             daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket, hold: bool) -> None:
        try:
            while chunk := source.recv(65536):
                if hold and chunk.startswith(b"POST /v1/faults"):
                    self.arrived.set()
                    self.release.wait()
                sink.sendall(chunk)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                sink.shutdown(socket.SHUT_WR)


def experiment(path: Path, *, gpu: Mapping[str, Any], lease_s: float) -> Path:
    """A host-target experiment that injects a single-bit ECC error on the GPUs ``gpu``
    selects (one agent batch) and then holds for 30 s."""
    import yaml

    document: dict[str, Any] = {
        "version": "1.0.0", "title": "killed between request and answer",
        "description": "the agent answers late; the orchestrator is killed meanwhile",
        "extensions": [{"name": "gameday", "target": "host", "lease_s": lease_s}],
        "method": [
            {"type": "action", "name": "ecc", "provider": {
                "type": "python", "module": "faults.gpu", "func": "ecc_error",
                "arguments": {"gpu": dict(gpu), "kind": "single_bit", "count": 1}}},
            HOLD],
    }
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path
