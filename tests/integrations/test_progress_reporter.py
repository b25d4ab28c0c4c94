"""gameday.integrations.progress: the plain hook in a real process, as a torchrun
script would call it, read back through each channel (its log, its Prometheus gauges,
its HTTP JSON endpoint) by real HTTP; and what the integrations may import."""

import ast
import json
import os
import subprocess
import sys
import textwrap
import urllib.request
from pathlib import Path

from gameday.integrations.progress import PATTERNS
from tests.verifiers.verifier_helpers import free_port
from verifiers.joblog import read_log_lines

REPO = Path(__file__).resolve().parent.parent.parent

SCRIPT = textwrap.dedent("""
    import sys, time
    from gameday.integrations.progress import ProgressReporter
    reporter = ProgressReporter()
    reporter.resumed(20)
    for step in range(21, 26):
        reporter.step(step)
    reporter.checkpointed(25)
    print("ready", flush=True)
    sys.stdin.read()
    reporter.close()
""")


def fetch(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as response:
        return str(response.read().decode())


def test_each_channel_reports_step_checkpoint_and_resume(tmp_path: Path) -> None:
    log, metrics, http = tmp_path / "progress.log", free_port(), free_port()
    env = {**os.environ, "PYTHONPATH": str(REPO), "GAMEDAY_PROGRESS_LOG": str(log),
           "GAMEDAY_PROGRESS_METRICS_PORT": str(metrics),
           "GAMEDAY_PROGRESS_HTTP_PORT": str(http), "RANK": "0"}
    job = subprocess.Popen([sys.executable, "-c", SCRIPT], env=env, stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE, text=True)
    try:
        assert job.stdout is not None and job.stdout.readline().strip() == "ready"
        events = [line.split()[2:] for line in log.read_text().splitlines()]
        assert events == [["start", f"pid={job.pid}"], ["resumed", "20"],
                          *[["step", str(n)] for n in range(21, 26)], ["checkpoint", "25"]]
        for use, count in (("progress", 5), ("resumed", 1), ("restart", 1), ("durable", 1)):
            assert len(read_log_lines(log, PATTERNS[use])) == count, use
        text = fetch(f"http://127.0.0.1:{metrics}/metrics")
        for line in ("gameday_trainer_step 25.0", "gameday_trainer_checkpoint_step 25.0",
                     "gameday_trainer_resumed_from_step 20.0"):
            assert line in text.splitlines()
        assert "process_start_time_seconds" in text
        assert json.loads(fetch(f"http://127.0.0.1:{http}/progress")) == {
            "step": 25, "checkpoint_step": 25, "resumed_from_step": 20, "pid": job.pid}
    finally:
        job.communicate("", timeout=10)
    assert job.returncode == 0


def test_only_rank_0_reports(tmp_path: Path) -> None:
    log = tmp_path / "progress.log"
    env = {**os.environ, "PYTHONPATH": str(REPO), "GAMEDAY_PROGRESS_LOG": str(log),
           "RANK": "1"}
    done = subprocess.run([sys.executable, "-c", SCRIPT], env=env, input="",
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 0 and done.stdout.strip() == "ready"
    assert not log.exists()


def test_the_integrations_import_no_other_part_of_gameday() -> None:
    """They run inside the user's job: only the standard library, their framework,
    prometheus_client, and each other."""
    allowed = {"transformers", "lightning", "prometheus_client", "gameday.integrations"}
    for path in sorted((REPO / "gameday" / "integrations").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            for name in names:
                ours = name.split(".")[0] in {"gameday", "verifiers", "faults"}
                assert not ours or name.startswith("gameday.integrations"), (path, name)
                if name.split(".")[0] not in sys.stdlib_module_names:
                    assert any(name == a or name.startswith(a + ".") for a in allowed), \
                        (path, name)
