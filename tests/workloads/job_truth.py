"""What the framework jobs of the workload tests share: their command line and their
ground-truth record (``--dir``/truth.jsonl, one ``{"event", "step", "attempt", "t"}``
object a line, flushed at once so a SIGKILL loses none written before it)."""

import argparse
import json
import os
import time
from pathlib import Path


def job_arguments() -> argparse.Namespace:
    """``--dir`` (the job's folder), ``--every`` (steps between checkpoints) and
    ``--step-s`` (a pause per step, so a test can kill it at a step of its choosing)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--dir", required=True)
    parser.add_argument("--every", type=int, default=10)
    parser.add_argument("--step-s", type=float, default=0.03)
    return parser.parse_args()


class TruthLog:
    """The job's ground truth, written by the test's own callback from the framework's
    state; ``attempt`` is the supervisor's ``GAMEDAY_TEST_ATTEMPT``."""

    def __init__(self, root: Path, step_s: float) -> None:
        self.out = (root / "truth.jsonl").open("a", buffering=1)
        self.attempt = int(os.environ.get("GAMEDAY_TEST_ATTEMPT", "0"))
        self.step_s = step_s

    def begin(self, step: int) -> None:
        """Training began at ``step`` (after any resume)."""
        self._write("begin", step)

    def step(self, step: int) -> None:
        """``step`` steps are done; then pause ``step_s``."""
        self._write("step", step)
        time.sleep(self.step_s)

    def _write(self, event: str, step: int) -> None:
        self.out.write(json.dumps({"event": event, "step": step, "attempt": self.attempt,
                                   "t": time.time()}) + "\n")
