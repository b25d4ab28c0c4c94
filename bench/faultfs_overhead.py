"""The fault filesystem's cost and precision, measured in one run on a real FUSE mount.

Reads a 1 MiB file ``--reads`` times directly from the backing directory and through the
mount (no fault), then through the mount with a ``storage.slow`` rule of ``--latency-ms``
on ``open``, and a stall released after ``--stall-s``. Prints medians and, last line,
``faultfs_overhead: passthrough_ratio=… slow_accuracy=… stall_release_ms=…`` where
``passthrough_ratio`` = mount / direct read time, ``slow_accuracy`` = (added time) /
(requested latency), ``stall_release_ms`` = how long after the stall's end the held read
finished.
"""

import argparse
import statistics
import tempfile
import threading
import time
from pathlib import Path

from gameday.node.faultfs.mount import FaultFsMount
from gameday.node.faultfs.rules import rule_for_fault


def median_read_s(path: Path, reads: int) -> float:
    times = []
    for _ in range(reads):
        started = time.perf_counter()
        with open(path, "rb") as handle:
            handle.read()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reads", type=int, default=30)
    parser.add_argument("--latency-ms", type=float, default=50.0)
    parser.add_argument("--stall-s", type=float, default=0.5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="gdsto-bench-") as tmp:
        root = Path(tmp)
        (root / "backing").mkdir()
        (root / "backing" / "blob").write_bytes(b"x" * (1 << 20))
        fs = FaultFsMount(root / "backing", root / "mnt", root / "ctl.sock")
        fs.start()
        try:
            fs.wait_mounted()
            direct = median_read_s(root / "backing" / "blob", args.reads)
            mounted = median_read_s(root / "mnt" / "blob", args.reads)
            fs.client.set_rule("slow", rule_for_fault("storage.slow", {
                "latency_ms": args.latency_ms, "ops": ["open"]}))
            slowed = median_read_s(root / "mnt" / "blob", max(5, args.reads // 3))
            fs.client.clear("slow")
            fs.client.set_rule("stall", rule_for_fault("storage.stall", {
                "duration_s": args.stall_s, "ops": ["open"]}))
            stalled_at = time.perf_counter()
            done: list[float] = []
            reader = threading.Thread(target=lambda: done.append(
                median_read_s(root / "mnt" / "blob", 1)))
            reader.start()
            reader.join()
            release_ms = ((time.perf_counter() - stalled_at) - args.stall_s) * 1000
        finally:
            fs.stop()
    added_ms = (slowed - mounted) * 1000
    print(f"read 1 MiB, median of {args.reads}: direct {direct * 1000:.2f} ms, "
          f"through faultfs {mounted * 1000:.2f} ms")
    print(f"slow {args.latency_ms:g} ms on open: added {added_ms:.1f} ms")
    print(f"stall {args.stall_s:g} s: the held read finished {release_ms:.1f} ms after it ended")
    print(f"faultfs_overhead: passthrough_ratio={mounted / direct:.2f} "
          f"slow_accuracy={added_ms / args.latency_ms:.2f} stall_release_ms={release_ms:.1f}")


if __name__ == "__main__":
    main()
