"""A small self-healing controller for the workload tests, as a process supervisor of
replicas is: it keeps ``--replicas`` replica processes running (each a tiny HTTP server
on its own port answering ``GET /healthz`` with its pid), starts a new one in a slot
whose process died, and counts a replica ``running`` only once its health check
answers. Its own API, ``GET /replicas`` on ``--port``, reports each slot's current
process and the controller's state transitions::

    {"replicas": [{"slot": 0, "pid": 4117, "port": 39001,
                   "state": "starting" | "running", "since": <unix seconds>}]}

Each replica has ``GAMEDAY_TEST_CONTROLLER=<--id>`` and ``GAMEDAY_TEST_SLOT=<n>`` in its
environment, so a fault selector picks one by its environment.

    python replica_controller.py --port P --replica-ports P0,P1,P2 --id ID
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

REPLICA = """
import os, sys
from http.server import BaseHTTPRequestHandler, HTTPServer
class H(BaseHTTPRequestHandler):
    def do_GET(self):
        body = str(os.getpid()).encode()
        self.send_response(200); self.send_header("Content-Length", str(len(body)))
        self.end_headers(); self.wfile.write(body)
    def log_message(self, *args): pass
server = HTTPServer(("127.0.0.1", int(sys.argv[1])), H)
server.allow_reuse_address = True
server.serve_forever()
"""


class Slot:
    def __init__(self, index: int, port: int, controller_id: str) -> None:
        self.index, self.port, self.controller_id = index, port, controller_id
        self.process: subprocess.Popen[bytes] | None = None
        self.state, self.since = "starting", time.time()

    def start(self) -> None:
        env = {**os.environ, "GAMEDAY_TEST_CONTROLLER": self.controller_id,
               "GAMEDAY_TEST_SLOT": str(self.index)}
        self.process = subprocess.Popen([sys.executable, "-c", REPLICA, str(self.port)],
                                        env=env)
        self.state, self.since = "starting", time.time()

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz",
                                        timeout=0.5) as answer:
                return self.process is not None and \
                    answer.read().decode() == str(self.process.pid)
        except OSError:
            return False

    def to_json(self) -> dict[str, Any]:
        return {"slot": self.index, "pid": self.process.pid if self.process else None,
                "port": self.port, "state": self.state, "since": self.since}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--replica-ports", required=True)
    parser.add_argument("--id", required=True)
    parser.add_argument("--every-s", type=float, default=0.05)
    args = parser.parse_args()
    slots = [Slot(index, int(port), args.id)
             for index, port in enumerate(args.replica_ports.split(","))]
    lock = threading.Lock()
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(0))
    for slot in slots:
        slot.start()

    class Api(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            with lock:
                body = json.dumps({"replicas": [slot.to_json() for slot in slots]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", args.port), Api)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        while True:
            for slot in slots:
                assert slot.process is not None
                if slot.process.poll() is not None:
                    with lock:
                        slot.start()
                elif slot.state == "starting" and slot.healthy():
                    with lock:
                        slot.state, slot.since = "running", time.time()
            time.sleep(args.every_s)
    finally:
        for slot in slots:
            if slot.process is not None:
                slot.process.kill()


if __name__ == "__main__":
    main()
