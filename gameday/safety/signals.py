"""Signals become interruptions that roll back: SIGINT, SIGTERM and SIGHUP alike.

Chaos Toolkit maps SIGTERM to an exception that a running Python activity swallows, so
the run goes on and exits 0. Here SIGINT, SIGTERM and SIGHUP raise :class:`Interrupted`,
a ``KeyboardInterrupt``: no activity's ``except Exception`` catches it, the toolkit
marks the run ``interrupted`` and plays the rollbacks, and the runner exits 128+signum.
While cleanup runs, signals are deferred (recorded, not raised) so a second Ctrl-C
cannot cut a revert in half.
"""

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

HANDLED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Interrupted(KeyboardInterrupt):
    """The run was interrupted by a signal."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(f"interrupted by {signal.Signals(signum).name}")

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


class Stopped(Interrupted):
    """The run was stopped for ``reason`` by gameday itself (a safeguard, the lever, a
    stop condition), delivered as ``signum`` to the main thread; it rolls back like an
    interruption and fails the run (exit 1), naming the reason."""

    def __init__(self, signum: int, reason: str) -> None:
        super().__init__(signum)
        self.reason = reason
        self.args = (reason,)

    def __str__(self) -> str:
        return self.reason

    @property
    def exit_code(self) -> int:
        return 1


class SignalState:
    """Which signal (if any) interrupted the run, and whether raising is deferred."""

    def __init__(self) -> None:
        self.received: int | None = None
        self.deferred = False

    def handle(self, signum: int, frame: FrameType | None) -> None:
        if self.received is None:
            self.received = signum
        if not self.deferred:
            raise Interrupted(signum)

    @property
    def exit_code(self) -> int | None:
        return None if self.received is None else 128 + self.received

    @property
    def name(self) -> str | None:
        """The name of the first signal received (``SIGINT``), or None."""
        return None if self.received is None else signal.Signals(self.received).name

    @property
    def interruption(self) -> str | None:
        """``interrupted by SIGINT`` (the first signal received), or None."""
        return None if self.name is None else f"interrupted by {self.name}"


STATE = SignalState()


def install() -> bool:
    """Map SIGINT/SIGTERM/SIGHUP to :class:`Interrupted` (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        return False
    for signum in HANDLED:
        signal.signal(signum, STATE.handle)
    return True


def reset() -> None:
    STATE.received = None
    STATE.deferred = False


@contextmanager
def deferred() -> Iterator[None]:
    """Record signals without raising while the block (cleanup) runs."""
    previous = STATE.deferred
    STATE.deferred = True
    try:
        yield
    finally:
        STATE.deferred = previous


class _Held:
    """:func:`held`'s block: a class rather than a generator, as a fan-out enters one per
    request sent and per answer read (8,192 at 16,384 GPUs: the generator's machinery
    was 2 % of it)."""

    __slots__ = ("before", "nested")

    def __enter__(self) -> None:
        self.nested = STATE.deferred
        if not self.nested:
            self.before = STATE.received
            STATE.deferred = True

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        if self.nested:
            return
        STATE.deferred = False
        if kind is None and STATE.received is not None and STATE.received != self.before:
            raise Interrupted(STATE.received)


def held() -> _Held:
    """Hold signals back while the block runs (a step that must not be cut in half, such
    as sending a request and noting that it was sent), then raise the interruption one
    brought meanwhile (unless the block raised). Inside :func:`deferred` (cleanup)
    signals stay deferred."""
    return _Held()
