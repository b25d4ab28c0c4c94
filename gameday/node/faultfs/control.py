"""The control channel of a mounted fault filesystem: JSON lines over a unix socket.

Requests (one JSON object per line, one answer line each):
``{"op": "set", "id": ID, "rule": {...}}``, ``{"op": "clear", "id": ID}`` (answers
``released``: how many hung operations now proceed), ``{"op": "clear_all"}``,
``{"op": "status"}`` (mountpoint, backing, pid, rules with hits and waiting operations).
An answer is ``{"ok": true, ...}`` or ``{"ok": false, "error": "one line"}``. The socket
is created mode 0600: only its owner (root, for a mount) may change faults.
"""

import contextlib
import json
import os
import socket
import threading
from pathlib import Path
from typing import Any

from gameday.node.faultfs.rules import Rule, RuleError, RuleSet

__all__ = ["ControlError", "ControlServer", "FaultFsClient"]

MAX_LINE = 64 * 1024


class ControlError(Exception):
    """The fault filesystem could not be reached, or refused a request (one line)."""


class ControlServer:
    """Serves the control channel for ``rules`` on ``socket_path`` (a daemon thread)."""

    def __init__(self, rules: RuleSet, socket_path: Path, *, info: dict[str, Any]) -> None:
        self.rules = rules
        self.socket_path = socket_path
        self.info = info
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        socket_path.parent.mkdir(parents=True, exist_ok=True)
        socket_path.unlink(missing_ok=True)
        old = os.umask(0o177)
        try:
            self._sock.bind(str(socket_path))
        finally:
            os.umask(old)
        self._sock.listen(16)
        self._thread = threading.Thread(target=self._serve, name="faultfs-control", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._sock.close()
        self.socket_path.unlink(missing_ok=True)

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._session, args=(conn,), daemon=True).start()

    def _session(self, conn: socket.socket) -> None:
        with conn, conn.makefile("rwb") as stream:
            for line in stream:
                answer = self.handle(line[:MAX_LINE])
                stream.write(json.dumps(answer).encode() + b"\n")
                stream.flush()

    def handle(self, line: bytes) -> dict[str, Any]:
        try:
            request = json.loads(line)
            if not isinstance(request, dict):
                raise ValueError("a request is a JSON object")
            op = request.get("op")
            if op == "set":
                self.rules.set(str(request["id"]), Rule.from_json(request["rule"]))
                return {"ok": True}
            if op == "clear":
                return {"ok": True, "released": self.rules.clear(str(request["id"]))}
            if op == "clear_all":
                return {"ok": True, "released": self.rules.clear_all()}
            if op == "status":
                return {"ok": True, **self.info, "pid": os.getpid(),
                        "rules": self.rules.status(), "hung": self.rules.hung()}
            raise ValueError(f"unknown op {op!r} (set, clear, clear_all, status)")
        except (RuleError, ValueError, KeyError, TypeError) as exc:
            return {"ok": False, "error": str(exc)}


class FaultFsClient:
    """Talks to one fault filesystem's control socket (a connection per request)."""

    def __init__(self, socket_path: Path, *, timeout_s: float = 5.0) -> None:
        self.socket_path = socket_path
        self.timeout_s = timeout_s

    def request(self, body: dict[str, Any]) -> dict[str, Any]:
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.settimeout(self.timeout_s)
                sock.connect(str(self.socket_path))
                sock.sendall(json.dumps(body).encode() + b"\n")
                with sock.makefile("rb") as stream:
                    line = stream.readline(MAX_LINE)
        except OSError as exc:
            raise ControlError(f"fault filesystem at {self.socket_path} does not answer "
                               f"({exc.strerror or exc})") from None
        try:
            answer = json.loads(line)
        except ValueError:
            raise ControlError(f"fault filesystem at {self.socket_path} gave no answer") from None
        if not isinstance(answer, dict) or not answer.get("ok"):
            error = answer.get("error") if isinstance(answer, dict) else answer
            raise ControlError(f"fault filesystem refused {body.get('op')}: {error}")
        return answer

    def set_rule(self, fault_id: str, rule: Rule) -> None:
        self.request({"op": "set", "id": fault_id, "rule": rule.to_json()})

    def clear(self, fault_id: str) -> int:
        return int(self.request({"op": "clear", "id": fault_id})["released"])

    def clear_all(self) -> int:
        return int(self.request({"op": "clear_all"})["released"])

    def status(self) -> dict[str, Any]:
        return self.request({"op": "status"})

    def alive(self) -> bool:
        try:
            self.status()
        except ControlError:
            return False
        return True
