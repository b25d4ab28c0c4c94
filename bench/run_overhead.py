"""gameday run vs chaos run on the same trivial experiment: 10 alternating runs, medians.

Last line: ``run_overhead: gameday_s=… chaos_s=… ratio=…`` (goal: ratio <= 1.2).
Both byte-compiled, as installed: pip compiled the toolkit's modules, ``make setup``
compiles gameday's (its editable install writes none where PYTHONDONTWRITEBYTECODE is set).
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent

#: An activity that returns True and imports nothing (of the tests or anything else).
TRUE = {"type": "python", "module": "os.path", "func": "isdir", "arguments": {"s": "/"}}
EXPERIMENT = {
    "title": "trivial", "description": "one probe before and after, one action",
    "steady-state-hypothesis": {"title": "ok", "probes": [{
        "type": "probe", "name": "ok", "tolerance": True, "provider": TRUE}]},
    "method": [{"type": "action", "name": "noop", "provider": TRUE}],
}


def timed(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, env=env, cwd=REPO, check=True, capture_output=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trivial.yaml"
        path.write_text(yaml.safe_dump(EXPERIMENT))
        env = dict(os.environ, PYTHONPATH=str(REPO), GAMEDAY_HOME=f"{tmp}/home",
                   GAMEDAY_JOURNALS=f"{tmp}/journals")
        ours, theirs = [], []
        for n in range(args.runs):  # a journal is never written over: a new path each run
            ours.append(timed([str(BIN / "gameday"), "run", str(path), "--journal-path",
                               f"{tmp}/g-{n}.json"], env))
            theirs.append(timed([str(BIN / "chaos"), "--no-version-check", "run", str(path),
                                 "--journal-path", f"{tmp}/c-{n}.json"], env))
    g, c = statistics.median(ours), statistics.median(theirs)
    print(f"gameday runs: {' '.join(f'{t:.2f}' for t in ours)}")
    print(f"chaos runs:   {' '.join(f'{t:.2f}' for t in theirs)}")
    print(f"run_overhead: gameday_s={g:.3f} chaos_s={c:.3f} ratio={g / c:.2f}")


if __name__ == "__main__":
    main()
