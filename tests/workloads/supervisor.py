"""A process supervisor for the workload tests, as a job scheduler's restart policy
would be: it runs a command, and starts it again each time it dies of anything but a
clean exit, up to ``--max-restarts`` times, ``--backoff-s`` after its death. Each child
gets ``GAMEDAY_TEST_ROLE=trainer`` and ``GAMEDAY_TEST_ATTEMPT=<n>`` in its environment
(the supervisor itself does not), so a fault selector picks the trainer by its
environment. One line per child start and exit goes to stdout.

    python supervisor.py --max-restarts 3 -- COMMAND...
"""

import argparse
import os
import signal
import subprocess
import sys
import time
from types import FrameType


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--max-restarts", type=int, default=3)
    parser.add_argument("--backoff-s", type=float, default=0.2)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    child: subprocess.Popen[bytes] | None = None

    def stop(signum: int, frame: FrameType | None) -> None:
        if child is not None and child.poll() is None:
            child.terminate()
            try:
                child.wait(timeout=10)
            except subprocess.TimeoutExpired:
                child.kill()
        sys.exit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    for attempt in range(args.max_restarts + 1):
        env = {**os.environ, "GAMEDAY_TEST_ROLE": "trainer",
               "GAMEDAY_TEST_ATTEMPT": str(attempt)}
        child = subprocess.Popen(command, env=env)
        print(f"{time.time():.6f} started attempt {attempt} pid {child.pid}", flush=True)
        code = child.wait()
        print(f"{time.time():.6f} attempt {attempt} exited {code}", flush=True)
        if code == 0:
            return 0
        time.sleep(args.backoff_s)
    return 1


if __name__ == "__main__":
    sys.exit(main())
