"""An injectable clock, so timing logic is tested without sleeping."""

import time
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Wall-clock seconds since the epoch (comparable across processes)."""
        ...

    def monotonic(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...


class SystemClock:
    """The real clock."""

    def now(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)


class FakeClock:
    """A clock that only moves when slept or advanced; for tests."""

    def __init__(self, start: float = 1_000_000.0) -> None:
        self._t = start
        self._m = 0.0

    def now(self) -> float:
        return self._t

    def monotonic(self) -> float:
        return self._m

    def sleep(self, seconds: float) -> None:
        self.advance(seconds)

    def advance(self, seconds: float) -> None:
        self._t += max(0.0, seconds)
        self._m += max(0.0, seconds)


SYSTEM_CLOCK: Clock = SystemClock()
