"""Alertmanager silences against a real Alertmanager (Debian's ``prometheus-alertmanager``):
validated in the extension, shown by ``--dry-run``, created before the method and expired
after the rollbacks by ``gameday run``, and expired by ``gameday cleanup`` for a dead run."""

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gameday.errors import InvalidInput
from gameday.evidence.ledger import Ledger, read_silences
from gameday.experiment.extension import parse_extension
from gameday.experiment.silence import silence_spec
from gameday.safety.alertmanager import AlertmanagerClient
from gameday.safety.cleanup import cleanup
from gameday.safety.targetconfig import TargetConfig
from tests.conftest import BIN, REPO, gameday, python_activity, write_experiment
from tests.report.observability_helpers import Daemon, alertmanager, silences


@pytest.fixture(scope="module")
def am() -> Iterator[Daemon]:
    server = alertmanager()
    try:
        yield server
    finally:
        server.close()


def experiment(am_url: str, marker: Path, **silence: Any) -> dict[str, Any]:
    return {
        "version": "1.0.0", "title": "silenced while the method runs",
        "description": "a method that sleeps while a test looks at Alertmanager",
        "extensions": [{"name": "gameday", "lease_s": 3, "silence": {
            "alertmanager": am_url, "matchers": ["alertname=~'Gpu.*'", "lab!=prod"],
            "comment": "test game day", "created_by": "tests", **silence}}],
        "method": [python_activity("action", "sleep", "sleep", seconds=4,
                                   marker=str(marker))],
    }


def test_the_extension_refuses_bad_silences() -> None:
    for silence, path, message in (
            ({"matchers": ["alertname=~'Gpu.*'"]}, "alertmanager", "needs an Alertmanager URL"),
            ({"alertmanager": "http://a:9093", "matchers": []}, "matchers", "non-empty list"),
            ({"alertmanager": "http://a:9093", "matchers": ["alertname~Gpu"]}, "matchers[0]",
             "must be a matcher"),
            ({"alertmanager": "http://a:9093", "matchers": ["alertname=~'('"]}, "matchers[0]",
             "not a regular expression"),
            ({"alertmanager": "http://a:9093", "matchers": ["alertname=~.*"]}, "matchers",
             "would silence every alert"),
            ({"alertmanager": "http://a:9093", "matchers": ["a=b"], "until": 3}, "until",
             "unknown key")):
        with pytest.raises(InvalidInput, match=message) as raised:
            parse_extension({"extensions": [{"name": "gameday", "silence": silence}]})
        assert raised.value.path == f"extensions[0].silence.{path}"
    spec = silence_spec({"matchers": ["alertname!~'Test.*'", "severity=critical"]}, "s",
                        environ={"GAMEDAY_ALERTMANAGER_URL": "http://127.0.0.1:9/"})
    assert spec.alertmanager == "http://127.0.0.1:9"
    assert [(m.is_regex, m.is_equal) for m in spec.matchers] == [(True, False), (False, True)]


def test_dry_run_shows_the_silence_and_creates_none(am: Daemon, tmp_path: Path,
                                                    env: dict[str, str]) -> None:
    before = len(silences(am))
    path = write_experiment(tmp_path / "exp.yaml", experiment(am.url, tmp_path / "m"))
    done = gameday(["run", str(path), "--dry-run"], env)
    assert done.returncode == 0, done.stderr
    assert f"silence in {am.url}: alertname=~'Gpu.*', lab!='prod' (by tests: test game day)" \
        in done.stdout
    assert len(silences(am)) == before


def test_run_holds_the_silence_during_the_method_and_expires_it(
        am: Daemon, tmp_path: Path, env: dict[str, str]) -> None:
    marker = tmp_path / "in-method"
    path = write_experiment(tmp_path / "exp.yaml", experiment(am.url, marker))
    journal = tmp_path / "journal.json"
    proc = subprocess.Popen([str(BIN / "gameday"), "run", str(path), "--journal-path",
                             str(journal)], env=env, cwd=REPO, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while not marker.with_suffix(".started").exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.05)
        active = [s for s in silences(am) if s["comment"] == "test game day"
                  and s["status"]["state"] == "active"]
        assert len(active) == 1 and active[0]["createdBy"] == "tests"
        assert {m["name"]: m["value"] for m in active[0]["matchers"]} == {
            "alertname": "Gpu.*", "lab": "prod"}
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    [silence] = [s for s in silences(am) if s["id"] == active[0]["id"]]
    assert silence["status"]["state"] == "expired"
    ledger = Path(env["GAMEDAY_HOME"]) / "ledger.jsonl"
    assert read_silences(ledger) == []
    timeline = json.loads(journal.read_text())["gameday"]["timeline"]
    assert [e["event"] for e in timeline if e["event"].startswith("silence")] == [
        "silence_created", "silence_expired"]


def test_cleanup_expires_the_silence_of_a_dead_run(am: Daemon, tmp_path: Path) -> None:
    spec = silence_spec({"alertmanager": am.url, "matchers": ["alertname=GpuDoubleBitEcc"],
                         "comment": "dead run"}, "s", environ={})
    client = AlertmanagerClient(am.url)
    now = time.time()
    silence_id = client.put(spec, now, now + 600)
    ledger_path = tmp_path / "home" / "ledger.jsonl"
    Ledger(ledger_path, "deadrun00001").record_silence(am.url, silence_id, now + 600)
    report = cleanup(ledger_path, lab_dir=None, config=TargetConfig())
    assert report.reverted == [f"expired: silence {silence_id} in {am.url} (run deadrun00001)"]
    assert client.get(silence_id)["status"]["state"] == "expired"
    again = cleanup(ledger_path, lab_dir=None, config=TargetConfig())
    assert again.reverted == [] and again.failed == []
    client.close()
