"""Lab start-up: ``lab up`` until every shard serves through the router and Prometheus
answers with all targets up. Last line: ``lab_startup: seconds=…`` (goal <= 3 s; Prometheus
2.42 applies new targets on a fixed 5 s tick, docs/gamedays.md "Run overhead and lab
start-up").
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
    times = []
    for _ in range(args.runs):
        with tempfile.TemporaryDirectory() as tmp:
            start = time.perf_counter()
            lab.up(Path(tmp) / "lab")
            times.append(time.perf_counter() - start)
            lab.down(Path(tmp) / "lab")
    print(f"runs: {' '.join(f'{t:.2f}' for t in times)}")
    print(f"lab_startup: seconds={statistics.median(times):.2f}")


if __name__ == "__main__":
    main()
