"""Reading an agent's state file in tests: an inject answers once its faults are saved as
``applying``; their ``active`` record is written as the answer goes out, so a test that
compares the file waits for that write first."""

import json
import pathlib

from tests.waiting import wait_until


def settled(state_path: pathlib.Path) -> bytes:
    """The state file's bytes once no fault in it is ``applying`` (at most 10 s)."""

    def read() -> bytes | None:
        data = state_path.read_bytes()
        applying = any(f["state"] == "applying" for f in json.loads(data)["faults"])
        return None if applying else data

    return wait_until(read, 10, f"{state_path} settled")
