"""Results where SREs look, end to end on one real lab: ``gameday play`` runs the flagship
and the checkpoint-RPO experiments under an Alertmanager silence of the lab's GPU alerts
(real ``prometheus-alertmanager``), pushes its results to a real ``prometheus-pushgateway``
and writes a metrics file; a real Prometheus scrapes the gateway and the lab's agents, and
every panel and the annotation of ``deploy/grafana/gameday-dashboard.json`` returns data.
The lab's self-healing works under the silence: the experiments pass."""

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import REPO, cli_env, gameday
from tests.lab.helpers import lab_json
from tests.report.observability_helpers import (
    Daemon,
    alertmanager,
    hostport,
    prometheus,
    pushgateway,
    query,
    silences,
)
from tests.waiting import wait_until

DASHBOARD = REPO / "deploy" / "grafana" / "gameday-dashboard.json"
EXPERIMENTS = ("gpu-ecc-dbe-reshard", "storage-stall-checkpoint-rpo")


@pytest.fixture(scope="module")
def servers(lab_dir: Path) -> Iterator[dict[str, Daemon]]:
    started: dict[str, Daemon] = {}
    try:
        started["am"] = alertmanager()
        started["gateway"] = pushgateway()
        agents = [hostport(n["agent_url"]) for n in lab_json(lab_dir)["nodes"]]
        started["prom"] = prometheus({"pushgateway": [hostport(started["gateway"].url)],
                                      "gameday-agent": agents},
                                     honor_labels=("pushgateway",))
        yield started
    finally:
        for server in started.values():
            server.close()


def silenced_copy(name: str, directory: Path, am_url: str) -> Path:
    document = yaml.safe_load((REPO / "experiments" / f"{name}.yaml").read_text())
    [extension] = [e for e in document["extensions"] if e["name"] == "gameday"]
    extension["silence"] = {"alertmanager": am_url, "matchers": ["alertname=~'Gpu.*'"],
                            "comment": f"game day: {name}", "created_by": "tests"}
    path = directory / f"{name}.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def played(servers: dict[str, Daemon], lab_dir: Path,
           tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    directory = tmp_path_factory.mktemp("observability")
    paths = [silenced_copy(name, directory, servers["am"].url) for name in EXPERIMENTS]
    playbook = directory / "silenced.yaml"
    playbook.write_text(yaml.safe_dump({
        "version": 1, "title": "silenced game day", "target": "lab",
        "experiments": [{"name": p.stem, "path": str(p)} for p in paths]}))
    env = cli_env(directory)
    env["GAMEDAY_LAB_DIR"] = str(lab_dir)
    # the first experiment's fault window lasts seconds: let Prometheus scrape the agents
    # before it starts (its first scrapes come some seconds after it starts)
    agents = len(lab_json(lab_dir)["nodes"])
    wait_until(lambda: len(query(servers["prom"], 'up{job="gameday-agent"} == 1')) == agents,
               60, "prometheus to scrape every lab agent", every_s=0.5)
    metrics_file = directory / "textfile" / "gameday.prom"
    done = gameday(["play", str(playbook), "--journal-dir", str(directory / "journals"),
                    "--metrics-file", str(metrics_file), "--pushgateway",
                    servers["gateway"].url], env, timeout=600)
    scored = gameday(["score", str(directory / "journals"), "--pushgateway",
                      servers["gateway"].url], env, timeout=120)
    return {"done": done, "scored": scored, "metrics_file": metrics_file, "dir": directory}


def test_self_healing_works_under_the_silence(played: dict[str, Any],
                                              servers: dict[str, Daemon]) -> None:
    done = played["done"]
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    ours = [s for s in silences(servers["am"]) if s["createdBy"] == "tests"]
    assert sorted(s["comment"] for s in ours) == [f"game day: {n}" for n in EXPERIMENTS]
    assert {s["status"]["state"] for s in ours} == {"expired"}


def test_the_metrics_file_holds_every_experiment(played: dict[str, Any]) -> None:
    text = played["metrics_file"].read_text()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    passed = {s.labels["experiment"]: s.value for s in
              families["gameday_experiment_passed"].samples}
    assert passed == dict.fromkeys(EXPERIMENTS, 1.0)
    rto = families["model_service_rto_seconds"].samples
    assert {s.labels["experiment"] for s in rto} >= {"gpu-ecc-dbe-reshard"}
    assert all("run" not in s.labels for f in families.values() for s in f.samples)


def test_every_dashboard_panel_has_data_in_prometheus(played: dict[str, Any],
                                                      servers: dict[str, Daemon]) -> None:
    scored = played["scored"]
    assert scored.returncode == 0, scored.stdout[-2000:] + scored.stderr[-2000:]
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] and dashboard["schemaVersion"] >= 30
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    prom = servers["prom"]
    deadline = time.monotonic() + 60
    while len(query(prom, "gameday_experiment_passed")) < len(EXPERIMENTS):
        assert time.monotonic() < deadline, ("prometheus never scraped both pushes: "
                                             + played["done"].stderr[-1500:])
        time.sleep(0.5)

    def expand(expr: str) -> str:
        return expr.replace("$experiment", ".*").replace("$target", ".*")

    empty = []
    for panel in dashboard["panels"]:
        assert panel["targets"], panel["title"]
        answered = [t["expr"] for t in panel["targets"] if query(prom, expand(t["expr"]))]
        if not answered:
            empty.append(panel["title"])
    assert empty == []
    [windows] = [a for a in dashboard["annotations"]["list"] if a["name"] == "Fault windows"]
    # a window lasts a few seconds: ask whether any scrape saw it, not a range query's steps
    held = query(prom, f"max_over_time(({windows['expr']})[15m:1s])")
    assert {series["metric"]["kind"] for series in held} >= {"gpu.ecc"}
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            label = variable["query"]["query"].split(", ")[1].rstrip(")")
            assert query(prom, f"count by ({label}) (gameday_experiment_passed)")

