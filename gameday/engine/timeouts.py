"""Activity timeouts the toolkit ignores for Python activities.

An activity's ``timeout`` arms a real-time interval timer in the main thread; when it
fires, :class:`ActivityTimedOut` is raised inside the activity, which the toolkit then
records as a failed activity with that one-line reason. Background activities run in
pool threads, where no timer can interrupt them: their timeout is not enforced.
"""

import signal
import threading
from types import FrameType
from typing import Any

from chaoslib.exceptions import ActivityFailed


class ActivityTimedOut(ActivityFailed):  # type: ignore[misc]
    """An activity ran past its ``timeout``."""


class _Armed:
    name: str = ""
    timeout_s: float = 0.0


_ARMED = _Armed()


def _fire(signum: int, frame: FrameType | None) -> None:
    raise ActivityTimedOut(
        f"activity '{_ARMED.name}' ran past its timeout of {_ARMED.timeout_s:g} s")


def arm(activity: dict[str, Any]) -> bool:
    """Start the timer for an activity that declares a timeout; False if it cannot be."""
    timeout = activity.get("timeout")
    if not timeout or activity.get("background"):
        return False
    if threading.current_thread() is not threading.main_thread():
        return False
    _ARMED.name = str(activity.get("name", "?"))
    _ARMED.timeout_s = float(timeout)
    signal.signal(signal.SIGALRM, _fire)
    signal.setitimer(signal.ITIMER_REAL, float(timeout))
    return True


def disarm() -> None:
    if threading.current_thread() is threading.main_thread():
        signal.setitimer(signal.ITIMER_REAL, 0)
