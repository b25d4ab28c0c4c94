"""The agent's deadline watcher (gameday.agent.server._Deadlines), on real sockets, as a
property: whatever the order of deadlines armed (a later one shorter than those before
it, which must wake the watcher; a longer one, which need not) and disarmed, each armed
connection is shut once its deadline has passed, not before, and a disarmed one never."""

import select
import socket
import time

from hypothesis import example, given, settings
from hypothesis import strategies as st

from gameday.agent.server import _Deadlines

#: How late a shutdown may come on a loaded 2-core machine.
LATE_S = 0.25

steps = st.lists(st.tuples(st.floats(min_value=0.02, max_value=0.8),  # seconds
                           st.floats(min_value=0.0, max_value=0.05),  # pause before
                           st.booleans()),  # disarmed at once
                 min_size=1, max_size=6)


@settings(max_examples=8, deadline=None)
@given(steps)
@example([(0.8, 0.0, False), (0.05, 0.0, False)])  # a later, shorter one: wakes the watcher
@example([(0.05, 0.0, True), (0.6, 0.0, False), (0.02, 0.01, False)])
def test_each_armed_connection_is_shut_at_its_deadline_and_no_other(
        plan: list[tuple[float, float, bool]]) -> None:
    deadlines = _Deadlines()
    pairs = [socket.socketpair() for _ in plan]
    try:
        due: dict[socket.socket, float] = {}  # each peer -> its deadline (at the latest)
        kept: list[socket.socket] = []
        for (seconds, pause, disarm), (ours, peer) in zip(plan, pairs, strict=True):
            time.sleep(pause)
            armed_at = time.monotonic()
            handle = deadlines.arm(ours, seconds)
            if disarm:
                deadlines.disarm(handle)
                kept.append(peer)
            else:
                due[peer] = armed_at + seconds
        shut: dict[socket.socket, float] = {}
        end = max(due.values(), default=time.monotonic()) + LATE_S
        while time.monotonic() < end and len(shut) < len(due):
            readable, _, _ = select.select([p for p in due if p not in shut], [], [], 0.005)
            now = time.monotonic()
            for peer in readable:
                assert peer.recv(1) == b""  # shut: the end of the stream
                shut[peer] = now
        for peer, at in due.items():
            assert peer in shut, "an armed connection was never shut"
            assert at - 0.005 <= shut[peer] <= at + LATE_S
        assert select.select(kept, [], [], 0)[0] == []  # the disarmed: never shut
    finally:
        for ours, peer in pairs:
            ours.close()
            peer.close()
