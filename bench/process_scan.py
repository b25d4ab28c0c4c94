"""How much one ``/proc`` read per batch saves: 1,024 ``cmdline`` lookups, each reading
``/proc`` again (as every lookup did before :func:`gameday.node.processes.one_scan`)
against all of them filtering one snapshot, on this machine's processes, and the same
1,024 items through a host agent's ``POST /v1/faults:check`` registry path.

``python bench/process_scan.py [--items 1024]``

Last line: ``process_scan: items=N processes=P per_item_s=... one_scan_s=... ratio=...
check_s=...`` (``ratio``: per-item over one scan, in this run).
"""

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # runs from a checkout

from gameday.agent.policy import load_policy
from gameday.agent.registry import FaultRegistry
from gameday.contract.backend import FaultRequest
from gameday.node.host.backend import host_backend
from gameday.node.processes import ProcessSnapshot, find_processes, one_scan


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--items", type=int, default=1024)
    items = parser.parse_args().items
    patterns = [f"(a+)+\\x00|gdbench-{n:04d}" for n in range(items)]
    started = time.perf_counter()
    for pattern in patterns:
        find_processes(cmdline=pattern)
    per_item = time.perf_counter() - started
    started = time.perf_counter()
    with one_scan():
        for pattern in patterns:
            find_processes(cmdline=pattern)
    once = time.perf_counter() - started
    with tempfile.TemporaryDirectory() as tmp:
        policy = Path(tmp) / "policy.json"
        policy.write_text(json.dumps({"kinds": ["process.pause"], "max_active": items,
                                      "processes": {"cmdline": ["gdbench-"]}}))
        backend = host_backend("bench")
        backend.use_policy(load_policy(policy))
        registry = FaultRegistry(backend, state_path=Path(tmp) / "state.json", node="bench")
        requests = [(FaultRequest("process.pause", {"cmdline": p}), 10.0) for p in patterns]
        started = time.perf_counter()
        results = registry.check_many(requests)
        check = time.perf_counter() - started
        registry.release()
    assert len(results) == items
    processes = len(ProcessSnapshot.scan().entries)
    print(f"process_scan: items={items} processes={processes} per_item_s={per_item:.3f} "
          f"one_scan_s={once:.3f} ratio={per_item / once:.1f} check_s={check:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
