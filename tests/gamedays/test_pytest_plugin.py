"""The pytest plugin: real pytest in a subprocess collects the shipped experiment files as
items and runs them against a real lab it starts for its session; pytest's own JUnit XML,
``-k`` selection and exit code carry the verdicts, each verifier a sub-result."""

import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from tests.conftest import REPO, cli_env

ECC = "experiments/gpu-ecc-dbe-reshard.yaml"
SILENT = "experiments/gpu-silent-corruption.yaml"


def _pytest(args: list[str], tmp: Path) -> subprocess.CompletedProcess[str]:
    env = cli_env(tmp)
    # its own --basetemp: else the inner pytest reaps the outer run's oldest temporary
    # directories, the session lab's among them
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider",
                           "-o", "addopts=", "--basetemp", str(tmp / "inner"), *args],
                          cwd=REPO, env=env, text=True,
                          capture_output=True, timeout=600)


def test_experiments_are_items_and_verifiers_sub_results(tmp_path: Path) -> None:
    junit = tmp_path / "junit.xml"
    result = _pytest(["--gameday", ECC, SILENT, "--gameday-target", "lab",
                      "--gameday-journal-dir", str(tmp_path / "journals"),
                      "--junitxml", str(junit), "-rf"], tmp_path)
    assert result.returncode == 1, result.stdout[-3000:] + result.stderr[-2000:]
    cases = {case.get("name"): case for case in ET.parse(junit).getroot().iter("testcase")}
    assert set(cases) >= {"recovered-within-rto", "shard-moved-off-bad-gpu",
                          "predictions-still-correct"}
    failed = {name for name, case in cases.items() if case.find("failure") is not None}
    assert "predictions-still-correct" in failed
    assert not failed & {"recovered-within-rto", "shard-moved-off-bad-gpu"}
    message = cases["predictions-still-correct"].find("failure")
    assert message is not None and "prediction hash mismatch" in (message.get("message") or "")
    assert len(list((tmp_path / "journals").glob("*.json"))) == 2
    lab = tmp_path / "home" / "lab"
    assert not (lab / "lab.json").exists()  # the session's lab was stopped


def test_without_the_flag_nothing_is_collected(tmp_path: Path) -> None:
    result = _pytest(["experiments", "--collect-only", "-q"], tmp_path)
    assert result.returncode == 5, result.stdout  # pytest's "no tests collected"
