"""Stopping a run from a background thread: the safety lever seen by the lease renewer,
an Alertmanager stop condition firing.

:func:`request` records the first reason and delivers :data:`STOP_SIGNAL` to the main
thread, whose handler (:func:`install`) raises :class:`RunStopped`, an interruption like
Ctrl-C: the toolkit stops the method and plays the rollbacks, the session reverts every
fault, and the verdict fails (exit 1) with the reason. While cleanup runs (signals
deferred) a stop is recorded but does not raise: the run is ending anyway.
"""

import signal
import threading
from types import FrameType
from typing import Final

from gameday.safety import signals

__all__ = ["STOP_SIGNAL", "RunStopped", "install", "pending", "request", "reset"]

STOP_SIGNAL: Final = signal.SIGUSR2

_pending: str | None = None
_lock = threading.Lock()


class RunStopped(signals.Stopped):
    """The run was stopped from outside (the lever, a stop condition) and rolled back."""

    def __init__(self, reason: str) -> None:
        super().__init__(STOP_SIGNAL, reason)


def _raise_stop(signum: int, frame: FrameType | None) -> None:
    reason = _pending
    if reason is None or signals.STATE.deferred:
        return
    raise RunStopped(reason)


def install() -> bool:
    """Handle :data:`STOP_SIGNAL` (main thread only; elsewhere a no-op, False)."""
    if threading.current_thread() is not threading.main_thread():
        return False
    signal.signal(STOP_SIGNAL, _raise_stop)
    return True


def request(reason: str) -> None:
    """Stop the run for ``reason`` (the first reason wins) from any thread."""
    global _pending
    with _lock:
        if _pending is not None:
            return
        _pending = reason
    if signal.getsignal(STOP_SIGNAL) is _raise_stop:
        signal.pthread_kill(threading.main_thread().ident or 0, STOP_SIGNAL)


def pending() -> str | None:
    """The reason the run was asked to stop, if it was."""
    return _pending


def reset() -> None:
    """Forget a stop (a new run in this process)."""
    global _pending
    with _lock:
        _pending = None
