"""process.kill / process.pause on real processes with real signals, and the freezer
stall (cgroup v1 freezer or v2 cgroup.freeze, whichever this host has)."""

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gameday.contract.backend import FaultRequest
from gameday.errors import FaultRejected
from gameday.node.cgroups import detect
from gameday.node.host.backend import host_backend
from gameday.node.host.fusefs import FaultFsLayers
from gameday.node.host.process import HostSignalFault
from gameday.node.host.storage import FuseStorageFault
from gameday.node.processes import (
    command_line,
    find_processes,
    one_scan,
    process_state,
    select_processes,
)
from tests.node.storage_support import PREFIX, PREFIX_ENV, assert_nothing_left
from tests.waiting import wait_until

TICKER = ("import sys, time\n"
          "while True:\n"
          "    sys.stdout.write('.'); sys.stdout.flush(); time.sleep(0.02)\n")


@pytest.fixture(autouse=True)
def cgroup_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PREFIX_ENV, PREFIX)


@pytest.fixture
def ticker(tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A real process that writes a dot every 20 ms (its progress is the file's size)."""
    out = open(tmp_path / "ticks", "wb")  # noqa: SIM115 (closed below)
    proc = subprocess.Popen([sys.executable, "-c", TICKER, "gdsto-ticker", str(tmp_path)],
                            stdout=out)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGCONT)  # in case a test left it stopped
            proc.kill()
        proc.wait()
        out.close()
        assert_nothing_left(tmp_path)


def ticks(tmp_path: Path) -> int:
    return (tmp_path / "ticks").stat().st_size


def test_pause_stalls_a_real_process_until_reverted(tmp_path: Path,
                                                    ticker: subprocess.Popen[bytes]) -> None:
    wait_until(lambda: ticks(tmp_path) > 5)
    pause = HostSignalFault("process.pause")
    request = FaultRequest("process.pause", {"pid": ticker.pid}, {"max_processes": 1})
    details = pause.apply("p-1", request)
    assert details["signal"] == "SIGSTOP"
    wait_until(lambda: process_state(ticker.pid) == "T")
    frozen = ticks(tmp_path)
    time.sleep(0.4)
    assert ticks(tmp_path) == frozen, "a stopped process made progress"
    pause.revert("p-1", request)
    pause.revert("p-1", request)  # idempotent
    wait_until(lambda: ticks(tmp_path) > frozen + 3)


def test_pause_with_duration_continues_by_itself(tmp_path: Path,
                                                 ticker: subprocess.Popen[bytes]) -> None:
    pause = HostSignalFault("process.pause")
    request = FaultRequest("process.pause", {"cmdline": f"gdsto-ticker {tmp_path}"},
                           {"duration_s": 0.5})
    pause.apply("p-2", request)
    wait_until(lambda: process_state(ticker.pid) == "T")
    wait_until(lambda: process_state(ticker.pid) in ("S", "R"), 5)
    pause.revert("p-2", request)


def test_kill_by_name_and_the_guards(tmp_path: Path, ticker: subprocess.Popen[bytes]) -> None:
    kill = HostSignalFault("process.kill")
    assert find_processes(cmdline=f"gdsto-ticker {tmp_path}") == [ticker.pid]
    with pytest.raises(FaultRejected, match=r"pid 1: PID 1 \(init\)"):
        kill.apply("k-0", FaultRequest("process.kill", {"pid": 1}, {}))
    with pytest.raises(FaultRejected, match="matches no process"):
        kill.apply("k-0", FaultRequest("process.kill", {"cmdline": "gdsto-no-such-thing"}, {}))
    extra = subprocess.Popen([sys.executable, "-c", TICKER, "gdsto-ticker", str(tmp_path)],
                             stdout=subprocess.DEVNULL)
    try:
        wait_until(lambda: len(find_processes(cmdline=f"gdsto-ticker {tmp_path}")) == 2)
        with pytest.raises(FaultRejected, match="matches 2 processes"):
            kill.apply("k-1", FaultRequest("process.kill",
                                           {"cmdline": f"gdsto-ticker {tmp_path}"}, {}))
        assert ticker.poll() is None and extra.poll() is None  # nothing was signalled
    finally:
        extra.kill()
        extra.wait()
    details = kill.apply("k-2", FaultRequest("process.kill", {"pid": ticker.pid}, {}))
    assert details["signal"] == "SIGKILL" and ticker.wait(timeout=5) == -9
    kill.revert("k-2", FaultRequest("process.kill", {"pid": ticker.pid}, {}))


def test_freezer_stall_freezes_and_thaws_a_real_process(
        tmp_path: Path, ticker: subprocess.Popen[bytes]) -> None:
    if detect().version("freezer") is None:
        pytest.skip("this host has no cgroup freezer")
    stall = FuseStorageFault("storage.stall", FaultFsLayers(tmp_path / "gdsto-state"))
    request = FaultRequest("storage.stall", {"pid": ticker.pid}, {"mechanism": "freezer"})
    wait_until(lambda: ticks(tmp_path) > 5)
    details = stall.apply("s-1", request)
    assert details["cgroup"].startswith(PREFIX)
    time.sleep(0.3)
    frozen = ticks(tmp_path)
    time.sleep(0.4)
    assert ticks(tmp_path) == frozen, "a frozen process made progress"
    stall.revert("s-1", request)
    wait_until(lambda: ticks(tmp_path) > frozen + 3)
    own = [line for line in Path(f"/proc/{ticker.pid}/cgroup").read_text().splitlines()
           if "freezer" in line]
    assert all(PREFIX not in line for line in own), own


def test_catalogue_entries_are_the_activities_and_the_host_handlers() -> None:
    from gameday.kinds import CATALOGUE, by_activity
    from gameday.node.host.backend import host_backend

    kinds = host_backend("here").capabilities()
    for name, func in [("storage.stall", "stall"), ("storage.errors", "errors"),
                       ("storage.slow", "slow"), ("process.kill", "kill"),
                       ("process.pause", "pause"), ("node.cpu_hog", "cpu_hog"),
                       ("node.memory_hog", "memory_hog")]:
        entry = CATALOGUE[name]
        assert by_activity(f"faults.{name.split('.')[0]}", func) is entry
        assert name in kinds, f"no host handler for {name}"
        assert entry.injected_at["lab"] in ("storage", "process")


def test_the_agent_own_threads_are_never_signalled() -> None:
    """A thread id of this process (the agent) is refused: stopping it would stop all."""
    started = threading.Event()
    release = threading.Event()

    def idle() -> None:
        started.set()
        release.wait(10)

    thread = threading.Thread(target=idle, daemon=True)
    thread.start()
    started.wait(5)
    try:
        tid = thread.native_id
        assert tid is not None and tid != os.getpid()
        pause = HostSignalFault("process.pause")
        with pytest.raises(FaultRejected, match=r"a thread of this agent|: this process"):
            pause.apply("t-1", FaultRequest("process.pause", {"pid": tid}, {}))
        with pytest.raises(FaultRejected, match=r"a thread of this agent|: this process"):
            pause.apply("t-2", FaultRequest("process.pause", {"pid": os.getpid()}, {}))
    finally:
        release.set()
        thread.join()


def test_bad_parameters_are_refused_before_anything_is_signalled(
        tmp_path: Path, ticker: subprocess.Popen[bytes]) -> None:
    pause = HostSignalFault("process.pause")
    bad = [({"pid": ticker.pid}, {"duration_s": "abc"}, "params.duration_s"),
           ({"pid": ticker.pid}, {"duration_s": float("nan")}, "params.duration_s"),
           ({"pid": ticker.pid}, {"max_processes": 100000}, "params.max_processes"),
           ({"pid": ticker.pid}, {"max_processes": True}, "params.max_processes"),
           ({"pid": ticker.pid}, {"signal": "KILL"}, "params.signal: unknown parameter"),
           ({"pid": ticker.pid, "x": 1}, {}, "target.x is unknown"),
           ({"pid": ticker.pid, "name": "python"}, {}, "exactly one of"),
           ({"pid": "12"}, {}, "target.pid"),
           ({"cmdline": "(a)\\1"}, {}, "not an RE2 pattern"),
           ({"cmdline": "a" * 300}, {}, "at most 256")]
    for target, params, message in bad:
        with pytest.raises(FaultRejected, match=message):
            pause.apply("b-1", FaultRequest("process.pause", target, params))
        assert process_state(ticker.pid) != "T", (target, params)


def test_a_catastrophic_pattern_is_matched_in_linear_time(
        tmp_path: Path, ticker: subprocess.Popen[bytes]) -> None:
    """``(a+)+\\x00`` backtracks exponentially in Python's engine; RE2 answers at once."""
    marker = "a" * 60
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", marker])
    try:
        assert find_processes(cmdline="(a+)+\\x00") == []
        assert find_processes(cmdline=f"{marker}$") == [holder.pid]
    finally:
        holder.kill()
        holder.wait()


def test_denied_names_are_never_signalled(tmp_path: Path) -> None:
    """A process named ``sshd`` (a copy of sleep, harmless) is refused by name."""
    sleep = shutil.which("sleep")
    assert sleep is not None
    fake = tmp_path / "sshd"
    shutil.copy(sleep, fake)
    proc = subprocess.Popen([str(fake), "30"])
    try:
        kill = HostSignalFault("process.kill")
        with pytest.raises(FaultRejected, match="sshd, which gameday never signals"):
            kill.apply("d-1", FaultRequest("process.kill", {"pid": proc.pid}, {}))
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.wait()


def test_select_by_environment_parent_and_cgroup() -> None:
    """Two workers with identical command lines, told apart by RANK; their parent picks
    both; a cgroup expression matches what /proc/PID/cgroup holds."""
    code = "import time; time.sleep(60)"
    parent = subprocess.Popen([sys.executable, "-c",
                               "import os, subprocess, sys, time\n"
                               "kids = [subprocess.Popen([sys.executable, '-c', "
                               f"{code!r}], env={{**os.environ, 'RANK': str(r), "
                               "'TORCHELASTIC_RUN_ID': 'sel-test'}) for r in (0, 1)]\n"
                               "time.sleep(60)"])
    try:
        deadline = time.monotonic() + 20
        workers: list[int] = []
        while time.monotonic() < deadline and len(workers) < 2:
            workers = select_processes(env={"TORCHELASTIC_RUN_ID": "sel-test"})
            time.sleep(0.1)
        assert len(workers) == 2
        rank1 = select_processes(cmdline="time.sleep", env={"RANK": "1",
                                                             "TORCHELASTIC_RUN_ID": "sel-test"})
        assert len(rank1) == 1 and rank1[0] in workers
        assert select_processes(parents=[parent.pid]) == workers
        own = Path(f"/proc/{workers[0]}/cgroup").read_text().splitlines()[0].split(":", 2)[2]
        assert workers[0] in select_processes(cgroup=f":{own}$".replace(".", r"\."),
                                              env={"RANK": "0"})
        assert select_processes(env={"RANK": "1", "TORCHELASTIC_RUN_ID": "other"}) == []
    finally:
        for pid in select_processes(parents=[parent.pid]):
            os.kill(pid, signal.SIGKILL)
        parent.kill()
        parent.wait()


def test_a_batch_reads_proc_once_for_all_its_lookups(tmp_path: Path) -> None:
    """Inside the host backend's batch (:func:`one_scan`), every lookup filters the one
    snapshot of ``/proc`` the first lookup read: a process started after it is not seen
    until the batch ends."""
    argv = [sys.executable, "-c", "import time; time.sleep(30)"]
    first = subprocess.Popen([*argv, f"gdscan-first-{tmp_path.name}"])
    second: subprocess.Popen[bytes] | None = None
    try:
        with host_backend("scan-node").batch():
            assert find_processes(cmdline=f"gdscan-first-{tmp_path.name}") == [first.pid]
            second = subprocess.Popen([*argv, f"gdscan-second-{tmp_path.name}"])
            wait_for_cmdline(second.pid, f"gdscan-second-{tmp_path.name}")
            assert find_processes(cmdline=f"gdscan-second-{tmp_path.name}") == []
            with one_scan():  # re-entrant: still the batch's snapshot
                assert find_processes(name=Path(sys.executable).name) != []
                assert find_processes(cmdline=f"gdscan-second-{tmp_path.name}") == []
        assert find_processes(cmdline=f"gdscan-second-{tmp_path.name}") == [second.pid]
    finally:
        for proc in (first, second):
            if proc is not None:
                proc.kill()
                proc.wait()


def wait_for_cmdline(pid: int, text: str) -> None:
    """Until ``/proc/PID/cmdline`` holds ``text`` (the child has exec'd)."""
    deadline = time.monotonic() + 10
    while text not in " ".join(command_line(pid)):
        assert time.monotonic() < deadline, f"pid {pid} never ran {text}"
        time.sleep(0.01)
