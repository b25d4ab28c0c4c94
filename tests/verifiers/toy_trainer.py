"""A toy trainer for the tests, run as its own process: it advances a step counter
every ``--step-s`` seconds, checkpoints every ``--every`` steps (an atomic rename of
``checkpoint`` in ``--dir``), resumes from that checkpoint when started again, and
serves its progress as JSON at ``GET /progress`` (``{"job": {"step": N}}``).

Its ground truth goes to ``truth.log`` in ``--dir``, one unbuffered line per event:
``step N`` once step N is done (before the endpoint shows it) and ``resumed N`` when it
starts from a checkpoint.

    python -m tests.verifiers.toy_trainer --port PORT --dir DIR
"""

import argparse
import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--dir", required=True)
    parser.add_argument("--step-s", type=float, default=0.05)
    parser.add_argument("--every", type=int, default=25)
    args = parser.parse_args()
    checkpoint = os.path.join(args.dir, "checkpoint")
    truth = os.open(os.path.join(args.dir, "truth.log"),
                    os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    resumed = 0
    if os.path.exists(checkpoint):
        with open(checkpoint) as handle:
            resumed = int(handle.read())
    os.write(truth, f"resumed {resumed}\n".encode())
    shown = {"step": resumed}

    class Progress(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = json.dumps({"job": {"step": shown["step"]}}).encode()
            self.send_response(200 if self.path == "/progress" else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", args.port), Progress)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    step = resumed
    while True:
        time.sleep(args.step_s)
        step += 1
        os.write(truth, f"step {step}\n".encode())
        shown["step"] = step
        if step % args.every == 0:
            with open(checkpoint + ".tmp", "w") as handle:
                handle.write(str(step))
            os.replace(checkpoint + ".tmp", checkpoint)


if __name__ == "__main__":
    main()
