"""Starting and stopping the lab when things go wrong: a supervisor killed with -9 and a
process that ignores SIGTERM, a process that fails to start, no Prometheus."""

import os
import signal
from pathlib import Path

import pytest

from gameday.errors import LabError
from gameday.lab import api as lab
from gameday.lab.proc import pid_alive
from tests.lab.helpers import assert_nothing_left, lab_footprint, predict, processes_mentioning

pytestmark = pytest.mark.lab


def test_down_cleans_up_after_a_supervisor_killed_with_sigkill(tmp_path: Path) -> None:
    info = lab.up(tmp_path / "lab", nodes=1, gpus_per_node=2, shards=1)
    try:
        assert predict(info)[0] == 200
        pids, ports = lab_footprint(info)
        router = next(p["pid"] for p in info["processes"] if p["role"] == "router")
        os.kill(router, signal.SIGSTOP)  # it cannot act on SIGTERM: only SIGKILL ends it
        os.kill(info["supervisor_pid"], signal.SIGKILL)
        lab.down(tmp_path / "lab", timeout_s=2.0)
        assert_nothing_left(info, pids, ports)
        assert not pid_alive(router)
    finally:
        lab.down(tmp_path / "lab")


def test_a_process_that_cannot_start_fails_up_with_its_log(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    fake = tmp_path / "prometheus"
    fake.write_text("#!/bin/sh\necho 'err: cannot bind the TSDB lock' >&2\nexit 3\n")
    fake.chmod(0o755)
    monkeypatch.setenv("GAMEDAY_PROMETHEUS", str(fake))
    with pytest.raises(LabError) as failed:
        lab.up(tmp_path / "lab", nodes=1, gpus_per_node=1, shards=1)
    message = str(failed.value)
    assert message.splitlines()[0].startswith(
        f"the lab in {tmp_path / 'lab'} did not start: prometheus exited with code 3")
    assert "cannot bind the TSDB lock" in message
    assert processes_mentioning(tmp_path / "lab") == []
    with pytest.raises(LabError, match="no lab runs in"):
        lab.status(tmp_path / "lab")
    lab.down(tmp_path / "lab")


def test_without_prometheus_up_says_how_to_install_it(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GAMEDAY_PROMETHEUS", str(tmp_path / "missing"))
    with pytest.raises(LabError, match="apt-get install --no-install-recommends prometheus"):
        lab.up(tmp_path / "lab")
    assert not (tmp_path / "lab").exists()


@pytest.mark.parametrize(("nodes", "shards", "message"), [
    (0, 6, "nodes must be between 1 and 16"),
    (2, 9, "shards must be between 1 and 8"),
])
def test_impossible_shapes_are_refused_before_starting_anything(
        tmp_path: Path, nodes: int, shards: int, message: str) -> None:
    with pytest.raises(LabError, match=message):
        lab.up(tmp_path / "lab", nodes=nodes, shards=shards)
    assert not (tmp_path / "lab").exists()
