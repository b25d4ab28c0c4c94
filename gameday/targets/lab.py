"""The lab target's lifecycle: the one module outside ``gameday.lab`` that reaches into it.

``gameday lab up|status|down`` and a run or playbook with target ``lab`` start, stop and
ask about the embedded lab through this module, which uses only the lab's public surface
(:mod:`gameday.lab.api`); the lab is otherwise reached as any target is, through its
discovery document (:func:`gameday.targets.base.lab_target`).
"""

from collections.abc import Callable
from pathlib import Path

from gameday.lab.api import down, format_status, running, status, up

__all__ = ["LabLease", "down", "format_status", "running", "status", "up"]


class LabLease:
    """Starts a lab when none runs, and stops only the one it started; ``say`` tells the
    user each (one line)."""

    def __init__(self, lab_dir: Path, say: Callable[[str], None]) -> None:
        self.lab_dir = lab_dir
        self.say = say
        self.started = False

    def ensure(self) -> None:
        if not running(self.lab_dir):
            self.say(f"starting the lab in {self.lab_dir} ...")
            self.started = True
            up(self.lab_dir)

    def release(self) -> None:
        if self.started:
            self.say("stopping the lab ...")
            down(self.lab_dir)
