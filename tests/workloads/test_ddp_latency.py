"""A real torchrun DDP job (gloo on CPU, ``bench/ddp_job.py``) with its two ranks in two
network namespaces of the test's own, joined by a veth: ``net.latency`` on rank 1's
link, applied by a real ``gameday agent serve --backend host`` in a ``gameday run``,
slows the collective; ``verifiers.throughput.degradation`` reads the job's log, and the
rate it gives during the fault holds the rate the job's own step timer saw."""

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from bench.ddp import LOG_PATTERN, DdpJob, ddp_job
from gameday.node.host.netdelay import LatencyFault
from tests.conftest import BIN, REPO, cli_env
from tests.host_agent import host_agent
from tests.node.net_support import PREFIX, NetnsPair, leftovers, netns_pair

TOKEN = "2b7e4d1a9c3f6e8b0d5a7c9e1f3b5d7a9c1e3f5b7d9a1c3e5f7b9d1a3c5e7f9b"

pytestmark = pytest.mark.skipif(LatencyFault(PREFIX).unavailable() is not None,
                                reason=str(LatencyFault(PREFIX).unavailable()))


@pytest.fixture
def ranks(tmp_path: Path) -> Iterator[tuple[NetnsPair, DdpJob]]:
    assert leftovers() == []
    with netns_pair() as pair, ddp_job(pair.a, pair.link_a, pair.ip_a, pair.b, pair.link_b,
                                       tmp_path) as job:
        yield pair, job
    assert leftovers() == []


def test_the_slowdown_gameday_measures_is_the_one_the_jobs_step_timer_saw(
        tmp_path: Path, ranks: tuple[NetnsPair, DdpJob]) -> None:
    pair, job = ranks
    policy = {"kinds": ["net.latency"], "interfaces": [pair.link_b]}
    experiment = tmp_path / "ddp-latency.yaml"
    experiment.write_text(yaml.safe_dump({
        "version": "1.0.0", "title": "1 ms on one rank's link slows the whole job",
        "description": "net.latency on rank 1's link; the throughput it costs",
        "extensions": [{"name": "gameday", "target": "host", "lease_s": 30}],
        "method": [
            {"type": "action", "name": "delay-rank-1", "pauses": {"before": 1.5},
             "provider": {"type": "python", "module": "faults.net", "func": "latency",
                          "arguments": {"link": {"netns": pair.b, "link": pair.link_b},
                                        "delay_ms": 1, "direction": "egress",
                                        "duration_s": 1.5}}},
            {"type": "probe", "name": "throughput-cost", "provider": {
                "type": "python", "module": "verifiers.throughput", "func": "degradation",
                "arguments": {"progress_log": {"path": str(job.log), "pattern": LOG_PATTERN},
                              "baseline_s": 1.5, "window_s": 0.5, "timeout_s": 10,
                              "interval_s": 0.1, "max_slowdown_pct": 95}}}],
        "rollbacks": [{"type": "action", "name": "revert", "provider": {
            "type": "python", "module": "faults.net", "func": "revert"}}]}))
    job.wait_steps(200)
    with host_agent(tmp_path, TOKEN, policy, node="gdddp-host") as (url, _):
        env = {**cli_env(tmp_path), "GAMEDAY_AGENT_URL": url, "GAMEDAY_AGENT_TOKEN": TOKEN}
        result = subprocess.run([str(BIN / "gameday"), "run", str(experiment),
                                 "--journal-path", str(tmp_path / "journal.json")], cwd=REPO,
                                env=env, text=True, capture_output=True, timeout=120)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    journal = json.loads((tmp_path / "journal.json").read_text())["gameday"]
    [fault] = journal["faults"]
    assert fault["kind"] == "net.latency" and fault["details"]["mechanism"] == "nfqueue"
    [measured] = journal["verifiers"]
    m = measured["measurement"]
    timer = job.timer()
    for window in (m["baseline"], m["during"]):
        own = timer.rate(window["start"], window["end"])
        # the log and the timer carry the same stamps: the interval holds it exactly
        assert window["rate_min"] - 1e-6 <= own <= window["rate_max"] + 1e-6, (window, own)
    own_slowdown = 100 * (1 - timer.rate(m["during"]["start"], m["during"]["end"])
                          / timer.rate(m["baseline"]["start"], m["baseline"]["end"]))
    assert m["slowdown_pct_min"] - 1e-6 <= own_slowdown <= m["slowdown_pct_max"] + 1e-6
    assert own_slowdown > 30  # 1 ms on one rank's link: every all-reduce waits for it
    assert m["recovered"]
