"""The one way tests wait for something a real process or server does: poll until true."""

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(check: Callable[[], T], timeout_s: float = 20.0, what: str = "condition", *,
               every_s: float = 0.05) -> T:
    """Call ``check`` every ``every_s`` until it returns something truthy, and return that;
    fail the test (``AssertionError`` naming ``what``) once ``timeout_s`` has passed."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(every_s)
