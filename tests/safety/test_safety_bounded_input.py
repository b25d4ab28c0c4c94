"""Bounded input: hostile files (alias bombs, deep nesting, huge scalars and numbers)
fail with one line and exit 2 in every command that reads them, in bounded memory:
each real ``gameday`` process runs under a 1 GiB address-space limit, which an
expanded alias bomb would blow through."""

import json
import resource
import subprocess
import sys
from pathlib import Path

import pytest
from chaoslib.exceptions import ActivityFailed

from gameday.engine.session import Session, activate, deactivate
from tests.safety.safety_helpers import REPO, env_for
from verifiers.prediction_hash import matches_golden

GAMEDAY = str(Path(sys.executable).parent / "gameday")

#: Nine levels of ten aliases each: 10^9 values once expanded, 1 KiB of text.
BOMB = "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"a{n}: &a{n} [{', '.join([f'*a{n - 1}'] * 10)}]\n" for n in range(1, 10))
HOSTILE_YAML = {
    "alias-bomb": BOMB,
    "deep": "a: " + "[" * 5000 + "]" * 5000 + "\n",
    "long-scalar": "title: " + "x" * 200_000 + "\n",
    "huge-number": "count: " + "9" * 100_000 + "\n",
}


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))


def _gameday(args: list[str], tmp: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([GAMEDAY, *args], env=env_for(tmp), cwd=REPO, text=True,
                          capture_output=True, timeout=120, preexec_fn=_limited)


def _one_line_exit_2(done: subprocess.CompletedProcess[str], path: Path) -> None:
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and str(path) in lines[0], done.stderr
    assert "Traceback" not in done.stderr and "MemoryError" not in done.stderr


@pytest.mark.parametrize("case", sorted(HOSTILE_YAML))
def test_hostile_yaml_fails_in_one_line_everywhere(case: str, tmp_path: Path) -> None:
    path = tmp_path / f"{case}.yaml"
    path.write_text(HOSTILE_YAML[case])
    journals = tmp_path / "journals"
    journals.mkdir()
    ok = REPO / "experiments"
    experiment = next(iter(sorted(ok.glob("*.yaml"))))
    for args in (["validate", str(path)], ["run", str(path)], ["play", str(path)],
                 ["gate", str(path)], ["coverage", str(journals), "--require", str(path)],
                 ["run", str(experiment), "--dry-run", "--target", "none",
                  "--target-config", str(path)]):
        done = _gameday(args, tmp_path)
        _one_line_exit_2(done, path)
        assert "too large" in done.stderr or "not valid YAML" in done.stderr or \
            "nested deeper" in done.stderr, (args, done.stderr)


def test_hostile_journals_fail_in_one_line(tmp_path: Path) -> None:
    journals = tmp_path / "journals"
    journals.mkdir()
    deep = journals / "deep.json"
    deep.write_text("{\"gameday\": " + "[" * 100_000 + "]" * 100_000 + "}")
    done = _gameday(["report", str(deep), "--format", "md"], tmp_path)
    _one_line_exit_2(done, deep)
    counted = _gameday(["coverage", str(journals)], tmp_path)  # no journal: bad input
    assert counted.returncode == 2 and "holds no gameday journal (1 other JSON files)" in \
        counted.stderr and "Traceback" not in counted.stderr, counted.stderr
    audited = _gameday(["audit", "verify", str(journals)], tmp_path)
    assert audited.returncode == 1 and audited.stdout.startswith("audit: FAILED"), \
        audited.stdout + audited.stderr
    assert "Traceback" not in audited.stderr


def test_a_hostile_golden_file_fails_the_probe_in_one_line(tmp_path: Path) -> None:
    golden = tmp_path / "golden.json"
    golden.write_text("[" * 100_000 + "]" * 100_000)
    activate(Session())
    try:
        with pytest.raises(ActivityFailed) as failed:
            matches_golden("http://127.0.0.1:9/predict", golden=str(golden))
    finally:
        deactivate()
    assert str(failed.value) == f"{golden}: not a golden file: nested too deep"
    assert json.loads(json.dumps(str(failed.value)))  # one line, plain text
