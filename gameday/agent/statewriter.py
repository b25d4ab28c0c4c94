"""The agent's state file written on a thread of its own, off the registry's lock.

:class:`StateWriter` takes the registry's latest faults (:meth:`StateWriter.submit`,
cheap: it only keeps them) and writes them with :class:`gameday.agent.state.StateFile`
on its thread; a newer submission replaces one not yet written, so a slow disk costs
writes, not a queue. Whoever must know the faults are on disk waits for their
generation (:meth:`StateWriter.outcome`, woken by ``on_done``), bounded, without holding
any lock the writer or the lease reaper needs: a state file on a slow or hung
filesystem delays the requests that wait for it, never the reaper or ``/healthz``.
"""

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from gameday.agent.state import StateFile

__all__ = ["StateWriter"]

#: Seconds the writer's thread waits for more to write before it ends.
IDLE_S: Final = 1.0


class StateWriter:
    """Writes ``state`` for node ``node``; ``on_done`` is called (without the writer's
    lock) after each write with its generation and its error (None: it succeeded). Its
    thread starts with the first :meth:`submit` and ends after :data:`IDLE_S` without
    one."""

    def __init__(self, state: StateFile, *, node: str,
                 on_done: Callable[[int, OSError | None], None] = lambda generation, error: None
                 ) -> None:
        self.state = state
        self._node = node
        self._on_done = on_done
        self._cond = threading.Condition()
        self._pending: tuple[int, Sequence[Mapping[str, Any]], float] | None = None
        self._submitted = 0  # the latest generation handed in
        self._written = 0  # the latest generation on disk
        self._failed: tuple[int, OSError] | None = None  # the latest failed one, and why
        self._thread: threading.Thread | None = None
        self._closing = False

    def submit(self, faults: Sequence[Mapping[str, Any]], saved_at: float) -> int:
        """Hand in the faults to write (they must not change after); their generation."""
        with self._cond:
            self._submitted += 1
            self._pending = (self._submitted, faults, saved_at)
            self._closing = False
            if self._thread is None:  # none yet, or the last one ended
                self._thread = threading.Thread(target=self._write_forever,
                                                name=f"agent-state-{self._node}", daemon=True)
                self._thread.start()
            self._cond.notify_all()
            return self._submitted

    def outcome(self, generation: int) -> OSError | bool:
        """True once ``generation`` (or a later one) is on disk; the error of the write
        that would have carried it, if that failed and none later succeeded; False
        while it is still to be written."""
        with self._cond:
            if self._written >= generation:
                return True
            if self._failed is not None and self._failed[0] >= generation:
                return self._failed[1]
            return False

    def close(self, timeout_s: float) -> bool:
        """Write what is pending, stop the thread and close the file's directory, waiting
        up to ``timeout_s``; False (and the directory left open) if a write is still
        running then. A later :meth:`submit` starts again."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join(timeout_s)
        with self._cond:
            if self._thread is not None:
                return False  # still writing (or started again)
            self.state.close()
        return True

    def _write_forever(self) -> None:
        while True:
            with self._cond:
                while self._pending is None:
                    idle = self._closing or not self._cond.wait(IDLE_S)
                    if idle and self._pending is None:
                        self._thread = None  # the next submit starts another
                        self._cond.notify_all()
                        return
                generation, faults, saved_at = self._pending
                self._pending = None
            error: OSError | None = None
            try:
                self.state.save(faults, node=self._node, saved_at=saved_at)
            except OSError as exc:
                error = exc
            with self._cond:
                if error is None:
                    self._written = generation
                else:
                    self._failed = (generation, error)
                self._cond.notify_all()
            self._on_done(generation, error)
