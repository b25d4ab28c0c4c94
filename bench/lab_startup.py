"""Lab start-up: ``lab up`` until every shard serves through the router and Prometheus
answers with all targets up. Prints each run's time, then where the median run's time
went (``lab.json``'s ``startup``: from when the supervisor waited for what). Last line:
``lab_startup: seconds=…`` (goal <= 3 s; Prometheus 2.42 applies new targets on a fixed
5 s tick, docs/gamedays.md "Run overhead and lab start-up").
"""

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from gameday.lab import api as lab


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    runs = []
    for _ in range(args.runs):
        with tempfile.TemporaryDirectory() as tmp:
            start = time.perf_counter()
            info = lab.up(Path(tmp) / "lab")
            runs.append((time.perf_counter() - start, info["startup"]))
            lab.down(Path(tmp) / "lab")
    print(f"runs: {' '.join(f'{t:.2f}' for t, _ in runs)}")
    seconds, startup = sorted(runs, key=lambda run: run[0])[len(runs) // 2]
    print(f"the median run, seconds after its supervisor started ({seconds:.2f} s after "
          "`lab up`):")
    for step in startup:
        print(f"  {step['at_s']:6.2f}  {step['waiting_for'] or 'ready'}")
    print(f"lab_startup: seconds={statistics.median(t for t, _ in runs):.2f}")


if __name__ == "__main__":
    main()
