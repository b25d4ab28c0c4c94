"""gameday.safety.signals.held: a real SIGINT sent to this process inside the block is raised
when the block ends, not in the middle of it; inside cleanup (deferred) it is not raised."""

import os
import signal

import pytest

from gameday.safety import signals


def test_a_signal_inside_a_held_step_is_raised_when_the_step_ends(gameday_signals: None) -> None:
    steps: list[str] = []
    with pytest.raises(signals.Interrupted) as caught, signals.held():
        steps.append("sent")
        os.kill(os.getpid(), signal.SIGINT)
        steps.append("noted")  # not cut in half
    assert steps == ["sent", "noted"] and caught.value.exit_code == 130
    with signals.held():  # nothing new arrived: nothing raised
        steps.append("again")


def test_inside_cleanup_a_held_step_raises_nothing(gameday_signals: None) -> None:
    with signals.deferred():
        with signals.held():
            os.kill(os.getpid(), signal.SIGTERM)
        assert signals.STATE.received == signal.SIGTERM
