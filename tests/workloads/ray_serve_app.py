"""A Ray Serve application for the workload tests, run with ``.venv-ray``'s Python (Ray
Serve from PyPI, which nobody here wrote): a local Ray cluster (its GCS, raylet and
dashboard) and one deployment, ``Scorer``, of ``--replicas`` replicas behind Ray's HTTP
proxy. Each answer is a tiny linear model's score of the posted inputs and the pid of
the replica that computed it, so a prober can tell a new replica's first answer.

    python ray_serve_app.py --http-port P --dashboard-port D --temp-dir DIR --replicas 3

It prints ``ready`` once every replica runs, and shuts Ray down when its standard
input closes or on SIGTERM (handled after ``ray.init``, whose native signal handler
would otherwise take it and hang).
"""

import argparse
import os
import signal
import sys
import threading
from types import FrameType
from typing import Any

import ray
from ray import serve
from starlette.requests import Request

WEIGHTS = [0.25, -0.5, 1.0, 0.125]


@serve.deployment(ray_actor_options={"num_cpus": 0}, health_check_period_s=1.0,
                  health_check_timeout_s=5.0, graceful_shutdown_timeout_s=1.0)
class Scorer:
    async def __call__(self, request: Request) -> dict[str, Any]:
        body = await request.json() if request.method == "POST" else {"inputs": [1, 1, 1, 1]}
        inputs = [float(x) for x in body["inputs"]]
        score = sum(w * x for w, x in zip(WEIGHTS, inputs, strict=True))
        return {"score": score, "pid": os.getpid()}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--http-port", type=int, required=True)
    parser.add_argument("--dashboard-port", type=int, required=True)
    parser.add_argument("--temp-dir", required=True)
    parser.add_argument("--replicas", type=int, default=3)
    args = parser.parse_args()
    stop = threading.Event()
    ray.init(num_cpus=2, include_dashboard=True, dashboard_host="127.0.0.1",
             dashboard_port=args.dashboard_port, _temp_dir=args.temp_dir,
             log_to_driver=False, configure_logging=False)
    serve.start(http_options={"host": "127.0.0.1", "port": args.http_port})
    serve.run(Scorer.options(num_replicas=args.replicas).bind(), name="scorer",
              route_prefix="/score")

    def on_term(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_term)
    threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
    print("ready", flush=True)
    stop.wait()
    serve.shutdown()
    ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
