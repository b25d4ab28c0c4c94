"""Stop conditions and the halt webhook against a REAL Prometheus firing a REAL alerting
rule into a REAL Alertmanager (Debian's packages): a gauge this test serves over HTTP is
scraped every second; when the test raises it, the rule fires, Alertmanager holds the
alert, and

- a running ``gameday run`` whose extension names the alert in ``stop_on`` rolls back
  and exits 1, journaling which alert stopped it; a ``gameday play`` whose playbook
  names one stops its run and skips the rest;
- Alertmanager routes another alert to ``gameday halt --serve-webhook`` (a real
  subprocess), which engages the lever on the agent (in-process, over real HTTP; the
  lab's virtual GPUs stand in for NVML): its fault is reverted and new ones refused.
"""

import json
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from gameday.errors import InvalidInput
from gameday.experiment.extension import parse_extension
from gameday.experiment.silence import parse_matcher
from gameday.safety.stop_conditions import AlertRule, firing, matches
from gameday.wire.agent_client import AgentClient, AgentHalted
from tests.conftest import python_activity, write_experiment
from tests.report.observability_helpers import Daemon
from tests.safety.safety_helpers import REPO, TOKEN, env_for, virtual_agents
from tests.verifiers.verifier_helpers import free_port

WEBHOOK_TOKEN = "wh" + "0123456789abcdef" * 4


class Gauges:
    """``/metrics`` with the gauges ``gameday_test_stop``, ``_halt`` and ``_play``."""

    def __init__(self) -> None:
        self.values = {"gameday_test_stop": 0.0, "gameday_test_halt": 0.0,
                       "gameday_test_play": 0.0}
        gauges = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                return

            def do_GET(self) -> None:
                body = "".join(f"{k} {v}\n" for k, v in gauges.values.items()).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.target = f"127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class Stack:
    def __init__(self, gauges: Gauges, am: Daemon, prom: Daemon, webhook_port: int,
                 token_file: Path) -> None:
        self.gauges, self.am, self.prom = gauges, am, prom
        self.webhook_port, self.token_file = webhook_port, token_file


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    directory = Path(tempfile.mkdtemp(prefix="gameday-halt-alerts-"))
    token_file = directory / "webhook-token"
    token_file.write_text(WEBHOOK_TOKEN + "\n")
    token_file.chmod(0o600)
    webhook_port = free_port()
    am_port = free_port()
    (directory / "am.yml").write_text(yaml.safe_dump({
        "route": {"receiver": "null", "group_wait": "0s", "group_interval": "1s",
                  "routes": [{"matchers": ['alertname="HaltTheFleet"'], "receiver": "halt",
                              "group_wait": "0s", "group_interval": "1s",
                              "repeat_interval": "1h"}]},
        "receivers": [{"name": "null"}, {"name": "halt", "webhook_configs": [{
            "url": f"http://127.0.0.1:{webhook_port}/halt", "send_resolved": True,
            "http_config": {"authorization": {"credentials_file": str(token_file)}}}]}]}))
    (directory / "rules.yml").write_text(yaml.safe_dump({"groups": [{
        "name": "gameday-test", "interval": "1s", "rules": [
            {"alert": "CheckoutErrorsHigh", "expr": "gameday_test_stop > 0",
             "labels": {"severity": "critical", "team": "checkout"},
             "annotations": {"summary": "checkout errors"}},
            {"alert": "GameDayMustStop", "expr": "gameday_test_play > 0",
             "labels": {"severity": "critical"}},
            {"alert": "HaltTheFleet", "expr": "gameday_test_halt > 0",
             "labels": {"severity": "page"},
             "annotations": {"summary": "error budget gone"}}]}]}))
    gauges = Gauges()
    prom_port = free_port()
    (directory / "prom.yml").write_text(yaml.safe_dump({
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(directory / "rules.yml")],
        "alerting": {"alertmanagers": [{"static_configs": [
            {"targets": [f"127.0.0.1:{am_port}"]}]}]},
        "scrape_configs": [{"job_name": "gauges", "static_configs": [
            {"targets": [gauges.target]}]}]}))
    am = Daemon("alertmanager", [
        "prometheus-alertmanager", f"--config.file={directory / 'am.yml'}",
        f"--storage.path={directory / 'am-data'}", f"--web.listen-address=127.0.0.1:{am_port}",
        "--cluster.listen-address="], am_port, "/-/ready")
    try:
        prom = Daemon("prometheus", [
            "prometheus", f"--config.file={directory / 'prom.yml'}",
            f"--storage.tsdb.path={directory / 'prom-data'}",
            f"--web.listen-address=127.0.0.1:{prom_port}", "--log.level=warn"],
            prom_port, "/-/ready")
        try:
            yield Stack(gauges, am, prom, webhook_port, token_file)
        finally:
            prom.close()
    finally:
        am.close()
        gauges.close()


def _wait(condition: Any, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} within {seconds} s")
        time.sleep(0.1)


def test_matchers_match_as_alertmanager_does() -> None:
    labels = {"alertname": "GpuDoubleBitEcc", "severity": "critical"}
    assert matches(parse_matcher("alertname=~Gpu.*", path="m"), labels)
    assert not matches(parse_matcher("alertname=~Gpu", path="m"), labels)  # anchored
    assert matches(parse_matcher("cluster!=prod", path="m"), labels)  # missing reads ""
    assert not matches(parse_matcher("cluster=~.+", path="m"), labels)
    rule = AlertRule((parse_matcher("alertname=GpuDoubleBitEcc", path="m"),
                      parse_matcher("severity=critical", path="m")))
    assert firing([{"labels": {"alertname": "GpuDoubleBitEcc"}}], [rule]) is None
    assert firing([{"labels": labels}, {"labels": "odd"}], [rule]) == (rule, labels)


@pytest.mark.parametrize(("stop_on", "path", "message"), [
    ({"alerts": [{"alertname": "X"}]}, "alertmanager", "needs an Alertmanager URL"),
    ({"alertmanager": "http://a:9093", "alerts": []}, "alerts", "non-empty list"),
    ({"alertmanager": "http://a:9093", "alerts": [{}]}, "alerts[0]", "at least one label"),
    ({"alertmanager": "http://a:9093", "alerts": [["alertname!=X"]]}, "alerts[0]",
     "would match alerts it does not name"),
    ({"alertmanager": "http://a:9093", "alerts": [["alertname~X"]]}, "alerts[0][0]",
     "must be a matcher"),
    ({"alertmanager": "http://a:9093", "alerts": [{"alertname": ["X"]}]},
     "alerts[0].alertname", "must be a string"),
    ({"alertmanager": "http://a:9093", "alerts": [{"alertname": "X"}], "interval_s": 0},
     "interval_s", "within 0.1..60"),
    ({"alertmanager": "http://a:9093", "alerts": [{"alertname": "X"}], "every": 1},
     "every", "unknown key"),
])
def test_the_extension_refuses_bad_stop_conditions(stop_on: dict[str, Any], path: str,
                                                   message: str) -> None:
    with pytest.raises(InvalidInput, match=message) as raised:
        parse_extension({"extensions": [{"name": "gameday", "stop_on": stop_on}]})
    assert raised.value.path == f"extensions[0].stop_on.{path}"


def test_a_firing_alert_stops_the_run_and_is_journaled(stack: Stack, tmp_path: Path) -> None:
    marker = tmp_path / "in-method"
    experiment = write_experiment(tmp_path / "exp.yaml", {
        "version": "1.0.0", "title": "stopped by an alert", "description": "stop_on test",
        "extensions": [{"name": "gameday", "stop_on": {
            "alertmanager": stack.am.url, "interval_s": 0.5,
            "alerts": [{"alertname": "CheckoutErrorsHigh", "severity": "critical"}]}}],
        "method": [python_activity("action", "sleep", "sleep", seconds=90,
                                   marker=str(marker))]})
    env = env_for(tmp_path)
    planned = subprocess.run([str(Path(sys.executable).parent / "gameday"), "plan",
                              str(experiment)], env=env, cwd=REPO, text=True,
                             capture_output=True, timeout=60)
    assert (f"stop on alerts in {stack.am.url}: {{alertname='CheckoutErrorsHigh', "
            "severity='critical'} (every 0.5 s)") in planned.stdout, planned.stdout
    journal = tmp_path / "journal.json"
    proc = subprocess.Popen([str(Path(sys.executable).parent / "gameday"), "run",
                             str(experiment), "--journal-path", str(journal)], env=env,
                            cwd=REPO, text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)
    try:
        _wait(lambda: marker.with_suffix(".started").exists() or proc.poll() is not None,
              60, "the method started")
        assert proc.poll() is None, proc.communicate()[0]
        time.sleep(2)  # the run watches a quiet Alertmanager meanwhile
        assert proc.poll() is None
        stack.gauges.values["gameday_test_stop"] = 1
        out, _ = proc.communicate(timeout=60)
    finally:
        stack.gauges.values["gameday_test_stop"] = 0
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 1, out
    assert "stop condition fired: alert CheckoutErrorsHigh" in out, out
    document = json.loads(journal.read_text())
    assert not marker.exists()  # the method was cut short
    events = [e for e in document["gameday"]["timeline"] if e["event"] == "stop_condition"]
    assert len(events) == 1
    assert events[0]["alert"]["alertname"] == "CheckoutErrorsHigh"
    assert events[0]["alert"]["team"] == "checkout"
    assert events[0]["rule"] == "{alertname='CheckoutErrorsHigh', severity='critical'}"
    assert any("stop condition fired" in r for r in document["gameday"]["verdict"]["reasons"])


def test_alertmanager_webhook_engages_the_lever(stack: Stack, tmp_path: Path) -> None:
    with virtual_agents(tmp_path, nodes=1) as servers:
        server = servers["node-0"]
        env = dict(env_for(tmp_path), GAMEDAY_AGENT_URL=server.url, GAMEDAY_AGENT_TOKEN=TOKEN,
                   GAMEDAY_LAB_DIR=str(tmp_path / "no-lab"))
        hook = subprocess.Popen(
            [str(Path(sys.executable).parent / "gameday"), "halt", "--serve-webhook",
             f"127.0.0.1:{stack.webhook_port}", "--token-file", str(stack.token_file)],
            env=env, cwd=REPO, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        try:
            assert hook.stdout is not None
            assert "halt webhook listening on" in hook.stdout.readline()
            with AgentClient(server.url, TOKEN) as client:
                client.inject("gpu.ecc", {"gpu": 0}, {"kind": "single_bit", "count": 1}, 600)
                assert len(server.registry.faults()) == 1
                stack.gauges.values["gameday_test_halt"] = 1
                _wait(lambda: server.lever.state.engaged, 60, "the webhook engaged the lever")
                state = client.halt_state()
                assert "HaltTheFleet" in state["reason"] and "error budget gone" in state["reason"]
                assert server.registry.faults() == []
                with pytest.raises(AgentHalted):
                    client.inject("gpu.ecc", {"gpu": 1}, {"kind": "single_bit", "count": 1}, 60)
                client.release_halt()
        finally:
            stack.gauges.values["gameday_test_halt"] = 0
            hook.terminate()
            hook.wait(timeout=20)
        assert hook.returncode == 0


def test_a_playbooks_stop_condition_stops_the_game_day(stack: Stack, tmp_path: Path) -> None:
    markers = [tmp_path / "first", tmp_path / "second"]
    for marker in markers:
        write_experiment(tmp_path / f"{marker.name}.yaml", {
            "version": "1.0.0", "title": marker.name, "description": "a long method",
            "method": [python_activity("action", "sleep", "sleep", seconds=90,
                                       marker=str(marker))]})
    playbook = tmp_path / "day.yaml"
    playbook.write_text(yaml.safe_dump({
        "version": 1, "title": "stopped by an alert",
        "stop_on": {"alertmanager": stack.am.url, "interval_s": 0.5,
                    "alerts": [{"alertname": "GameDayMustStop"}]},
        "experiments": [{"path": "first.yaml"}, {"path": "second.yaml"}]}))
    env = env_for(tmp_path)
    proc = subprocess.Popen([str(Path(sys.executable).parent / "gameday"), "play",
                             str(playbook), "--journal-dir", str(tmp_path / "journals")],
                            env=env, cwd=REPO, text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)
    try:
        _wait(lambda: markers[0].with_suffix(".started").exists() or proc.poll() is not None,
              60, "the first experiment started")
        assert proc.poll() is None, proc.communicate()[0]
        stack.gauges.values["gameday_test_play"] = 1
        out, _ = proc.communicate(timeout=90)
    finally:
        stack.gauges.values["gameday_test_play"] = 0
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode != 0, out
    assert "stopped: stop condition fired: alert GameDayMustStop" in out, out
    assert not markers[1].with_suffix(".started").exists()  # the rest was skipped


def test_a_playbooks_bad_stop_condition_names_file_key_and_line(tmp_path: Path) -> None:
    write_experiment(tmp_path / "one.yaml", {
        "version": "1.0.0", "title": "one", "description": "d",
        "method": [python_activity("action", "sleep", "sleep", seconds=0)]})
    playbook = tmp_path / "day.yaml"
    playbook.write_text("version: 1\ntitle: t\nstop_on:\n  alertmanager: http://a:9093\n"
                        "  alerts:\n    - [\"alertname~X\"]\nexperiments:\n"
                        "  - {path: one.yaml}\n")
    done = subprocess.run([str(Path(sys.executable).parent / "gameday"), "validate",
                           str(playbook)], env=env_for(tmp_path), cwd=REPO, text=True,
                          capture_output=True, timeout=60)
    assert done.returncode == 2
    assert f"{playbook}:6: stop_on.alerts[0][0]: must be a matcher" in done.stdout + done.stderr
