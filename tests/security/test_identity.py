"""Checks are made on the object acted on (issue 25, items 1 and 7): a thread id is its
process, a process the policy refuses reads as no process at all (``403``), the signal
goes through a pidfd opened before the check. Against a live agent over mutual TLS, with
real processes and threads."""

import os
import random
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from gameday.errors import AgentError
from gameday.node.processes import NO_ALLOWED_MATCH, PinnedProcess
from tests.security.conftest import LiveAgent, sleeper, state, unique

ORCHESTRATOR = """#!{python}
import threading, time
for _ in range(3):
    threading.Thread(target=time.sleep, args=(300,), daemon=True).start()
time.sleep(300)
"""


def fake_orchestrator(tmp_path: Path, marker: str) -> subprocess.Popen[bytes]:
    """A process whose command line is ``gameday run MARKER`` (a script named gameday),
    with three threads: what the agent must never stop."""
    script = tmp_path / "bin" / "gameday"
    script.parent.mkdir(exist_ok=True)
    script.write_text(ORCHESTRATOR.format(python=sys.executable))
    script.chmod(0o755)
    proc = subprocess.Popen([str(script), "run", marker])
    while len(os.listdir(f"/proc/{proc.pid}/task")) < 4:
        pass
    return proc


def threads(pid: int) -> list[int]:
    return sorted(int(t) for t in os.listdir(f"/proc/{pid}/task") if int(t) != pid)


def refused(agent: LiveAgent, target: Mapping[str, Any]) -> AgentError:
    with agent.client() as client, pytest.raises(AgentError) as caught:
        client.inject("process.pause", target, {}, 10)
    return caught.value


def test_a_thread_of_a_protected_process_is_that_process_and_refused(
        tmp_path: Path, agent_with: Callable[..., LiveAgent]) -> None:
    marker = unique("gdsec-orch")
    agent = agent_with({"kinds": ["process.pause"], "processes": {"cmdline": [marker]}})
    orchestrator = fake_orchestrator(tmp_path, marker)
    agent.started.append(orchestrator)
    for pid in [orchestrator.pid, *threads(orchestrator.pid)]:
        error = refused(agent, {"pid": pid})
        assert error.status == 403, error
        assert f"pid {orchestrator.pid}: a gameday orchestrator" in str(error)
        assert marker not in str(error)  # its command line is never quoted
    assert state(orchestrator.pid) != "T"


def test_a_thread_of_an_allowed_process_pauses_its_process_by_its_tgid(
        agent_with: Callable[..., LiveAgent]) -> None:
    marker = unique("gdsec-allowed")
    agent = agent_with({"kinds": ["process.pause"], "processes": {"cmdline": [marker]}})
    proc = sleeper(marker, threads=2)
    agent.started.append(proc)
    with agent.client() as client:
        fault = client.inject("process.pause", {"pid": threads(proc.pid)[0]}, {}, 10)
        assert [p["pid"] for p in fault["details"]["processes"]] == [proc.pid]
        assert state(proc.pid) == "T"
        client.revert(fault["id"])
    assert state(proc.pid) != "T"


def test_a_refused_process_reads_exactly_as_no_process(
        agent_with: Callable[..., LiveAgent]) -> None:
    marker = unique("gdsec-allowed")
    agent = agent_with({"kinds": ["process.pause"], "processes": {"cmdline": [marker]}})
    other = sleeper(unique("gdsec-other"), threads=1)
    agent.started.append(other)
    gone = subprocess.Popen(["true"])
    gone.wait()
    for target in ({"pid": other.pid}, {"pid": threads(other.pid)[0]}, {"pid": 1},
                   {"pid": gone.pid}, {"name": "sshd"}, {"name": "gdsec-no-such"}):
        error = refused(agent, target)
        assert error.status == 403 and str(error).endswith(NO_ALLOWED_MATCH), (target, error)
    assert state(other.pid) != "T"


def test_the_pidfd_is_the_process_checked_not_a_later_one_with_its_pid() -> None:
    """A pidfd opened on a process that exits refuses the signal (ESRCH), whatever reuses
    the pid afterwards: what :class:`PinnedProcess` relies on."""
    proc = sleeper(unique("gdsec-reuse"))
    pinned = PinnedProcess.open(proc.pid)
    assert pinned is not None and pinned.alive()
    proc.kill()
    proc.wait(5)
    assert not pinned.alive()
    with pytest.raises(Exception, match="exited"):
        pinned.send(signal.SIGSTOP)
    pinned.close()


def test_the_preview_reads_nothing_of_a_refused_process_one_pattern_at_a_time(
        agent_with: Callable[..., LiveAgent]) -> None:
    """The attack of the issue: guess a refused process's command line (and an ``env``
    value) one pattern at a time through ``faults:check``. Every prefix of the secret,
    and random patterns that match nothing, answer the same status and the same line
    (but for the echoed target), in a check, an inject and a batch."""
    allowed, secret = unique("gdsec-allowed"), unique("gdsec-secret")
    agent = agent_with({"kinds": ["process.pause"], "processes": {"cmdline": [allowed]}})
    victim = sleeper(secret, env={"GDSEC_ENV": secret})
    agent.started.append(victim)
    rng = random.Random(7)
    guesses = [{"cmdline": secret[:n]} for n in range(4, len(secret) + 1)]
    guesses += [{"env": {"GDSEC_ENV": secret}}, {"pid": victim.pid}]
    guesses += [{"cmdline": "gdsec-" + "".join(rng.choice("0123456789abcdef") for _ in
                                               range(rng.randint(1, 12)))} for _ in range(20)]
    items = [{"kind": "process.pause", "target": target, "lease_s": 5} for target in guesses]
    with agent.client() as client:
        results = client.check_many(items)
        answers = {(r["status"], r["error"].split("} ", 1)[-1]) for r in results}
        assert answers == {(403, NO_ALLOWED_MATCH)}, answers
        for item in items[:3] + items[-3:]:
            with pytest.raises(AgentError) as single:
                client.inject("process.pause", item["target"], {}, 5)
            assert single.value.status == 403 and str(single.value).endswith(NO_ALLOWED_MATCH)
            with pytest.raises(AgentError) as batch:
                client.inject_many([item])
            assert batch.value.status == 403 and str(batch.value).endswith(NO_ALLOWED_MATCH)
    assert state(victim.pid) != "T"
