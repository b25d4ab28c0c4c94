"""``gameday score DIR``: the resilience score from verified journals only, traceable to
journal hashes; on the coverage page, as metrics and as a gate (``gate --min-score``).
Real hash-chained journal files (copies of a journal recorded on the lab), real keys,
the real CLI."""

import datetime
import hashlib
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from gameday.evidence import checked
from gameday.evidence.journal import write_journal
from gameday.gamedays.playbook import Requirement
from gameday.gamedays.score import Policy, compute
from tests.conftest import REPO, cli_env, gameday_main
from tests.report.reports_helpers import varied

NOW = time.time()


def _iso(days_ago: float) -> str:
    return datetime.datetime.fromtimestamp(NOW - days_ago * 86400, datetime.UTC).isoformat()


def _journal(*, experiment: str, passed: bool, days_ago: float, tags: list[str],
             fault: str = "gpu.ecc", layer: str = "device") -> dict[str, Any]:
    journal = varied(passed=passed, experiment=experiment, end=_iso(days_ago), fault=fault,
                     layer=layer)
    journal["experiment"]["tags"] = tags
    return journal


def _write(directory: Path, journals: list[dict[str, Any]]) -> list[Path]:
    paths = []
    for n, journal in enumerate(journals):
        path = directory / f"2026110{n}T100000Z-run-{n}.json"
        write_journal(path, journal)
        paths.append(path)
    return paths


def test_the_formula_by_hand(tmp_path: Path) -> None:
    """inference: a critical pass 30 days old (3 x 0.5) and a warning failure (0 of 1);
    training: a fresh warning pass (1 of 1), whose older failing run does not count; one
    required node.cpu_hog scenario not run (0 of 1)."""
    directory = tmp_path / "j"
    _write(directory, [
        _journal(experiment="experiments/a.yaml", passed=True, days_ago=30,
                 tags=["service:inference", "severity:critical"]),
        _journal(experiment="experiments/b.yaml", passed=False, days_ago=1,
                 tags=["service:inference"]),
        _journal(experiment="experiments/c.yaml", passed=False, days_ago=2,
                 tags=["service:training"]),
        _journal(experiment="experiments/c.yaml", passed=True, days_ago=0,
                 tags=["service:training"]),
    ])
    requirement = tmp_path / "req.yaml"
    requirement.write_text("coverage:\n  require:\n    - {fault: node.cpu_hog, layer: node, "
                           "scenarios: 1}\n")
    result = gameday_main(["score", str(directory), "--require", str(requirement), "--output",
                      "json"], cli_env(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    score = json.loads(result.stdout)
    services = {g["name"]: g["score"] for g in score["services"]}
    assert abs(services["inference"] - 100 * 1.5 / 4) < 0.1
    assert abs(services["training"] - 100.0) < 0.1
    assert abs(score["overall"]["score"] - 100 * (1.5 + 1) / (3 + 1 + 1 + 1)) < 0.1
    cells = {g["name"]: g for g in score["cells"]}
    assert cells["node.cpu_hog/node"]["score"] == 0 and cells["node.cpu_hog/node"]["not_run"] == 1
    # every point names the journal it came from, and that journal's exact SHA-256
    for point in score["overall"]["points"]:
        if point["journal"] is not None:
            assert hashlib.sha256(Path(point["journal"]).read_bytes()).hexdigest() == \
                point["sha256"]
    text = gameday_main(["score", str(directory), "--require", str(requirement)], cli_env(tmp_path))
    assert text.returncode == 0 and text.stdout.startswith("score: overall 41.7 over 4 points")
    halved = gameday_main(["score", str(directory), "--half-life-days", "15", "--weights",
                      "critical=1", "--output", "json"], cli_env(tmp_path))
    inference = {g["name"]: g["score"] for g in json.loads(halved.stdout)["services"]}
    assert abs(inference["inference"] - 100 * 0.25 / 2) < 0.1


def test_a_tampered_journal_is_listed_and_counts_for_nothing(tmp_path: Path) -> None:
    directory = tmp_path / "j"
    paths = _write(directory, [
        _journal(experiment="experiments/a.yaml", passed=False, days_ago=3,
                 tags=["service:inference"]),
        _journal(experiment="experiments/b.yaml", passed=True, days_ago=1,
                 tags=["service:inference"])])
    paths[1].write_text(paths[1].read_text().replace('"passed": true', '"passed": true ', 1))
    result = gameday_main(["score", str(directory), "--output", "json"], cli_env(tmp_path))
    assert result.returncode == 0, result.stderr
    score = json.loads(result.stdout)
    assert score["overall"]["points"] == [] and score["overall"]["score"] is None
    assert {r["journal"] for r in score["rejected"]} == {str(p) for p in paths}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(runs=st.lists(st.tuples(st.integers(0, 4), st.booleans(), st.floats(0, 200),
                               st.sampled_from(["warning", "critical", "other"]),
                               st.sampled_from(["inference", "training", ""])),
                     min_size=1, max_size=8),
       edit=st.one_of(st.none(), st.integers(0, 7)))
def test_only_verified_journals_count_whatever_is_edited(
        runs: list[tuple[int, bool, float, str, str]], edit: int | None) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        paths = _write(directory, [
            _journal(experiment=f"experiments/e{e}.yaml", passed=passed, days_ago=age,
                     tags=([f"service:{svc}"] if svc else []) + [f"severity:{sev}"])
            for e, passed, age, sev, svc in runs])
        if edit is not None:
            target = paths[edit % len(paths)]
            target.write_text(target.read_text().replace('"passed": false',
                                                         '"passed": true', 1) + " ")
        evidence = checked.check(directory)
        score = compute([s for _, s in evidence.verified],
                        rejected=[(str(j.path), str(j.problem)) for j in evidence.rejected],
                        requirements=[Requirement("gpu.ecc", "device", 6)], now=NOW)
        verified = {str(p): s.sha256 for p, s in evidence.verified}
        for point in score.overall.points:
            assert point.journal is None or verified[point.journal] == point.sha256
        assert {j for j, _ in score.rejected} == {str(j.path) for j in evidence.rejected}
        for group in (score.overall, *score.services, *score.cells):
            assert group.value is None or 0.0 <= group.value <= 100.0
        if edit is None:
            assert not score.rejected and len(verified) == len(paths)


def test_score_metrics_coverage_page_and_gate(tmp_path: Path) -> None:
    directory = tmp_path / "j"
    ecc = "experiments/gpu-ecc-dbe-reshard.yaml"
    _write(directory, [_journal(experiment=ecc, passed=True, days_ago=0,
                                tags=["service:inference", "severity:critical"])])
    env = cli_env(tmp_path)
    metrics = tmp_path / "score.prom"
    result = gameday_main(["score", str(directory), "--metrics-file", str(metrics)], env)
    assert result.returncode == 0, result.stderr
    samples = {(family.name, tuple(sorted(sample.labels.items()))): sample.value
               for family in text_string_to_metric_families(metrics.read_text())
               for sample in family.samples}
    overall = samples[("gameday_resilience_score", (("name", "overall"), ("scope", "overall")))]
    assert 99.9 < overall <= 100.0  # decayed by the seconds since the run ended
    assert ("gameday_resilience_score", (("name", "inference"), ("scope", "service"))) in samples
    assert samples[("gameday_resilience_score_rejected_journals", ())] == 0
    page = gameday_main(["coverage", str(directory), "--format", "html"], env)
    assert page.returncode == 0 and "Resilience score: 100.0" in page.stdout
    playbook = tmp_path / "gate.yaml"
    playbook.write_text(yaml.safe_dump({
        "version": 1, "title": "g", "target": "lab",
        "experiments": [{"name": "ecc", "path": str(REPO / ecc)}],
        "coverage": {"require": [{"fault": "gpu.ecc", "layer": "device", "scenarios": 2}]}}))
    # one of two required scenarios ran: 3 of 4
    low = gameday_main(["gate", str(playbook), "--journals", str(directory), "--min-score", "70"],
                  env)
    assert low.returncode == 0, low.stdout + low.stderr
    high = gameday_main(["gate", str(playbook), "--journals", str(directory), "--min-score", "80",
                    "--junit", str(tmp_path / "junit.xml")], env)
    assert high.returncode == 1
    assert "gate.min_score: resilience score 75.0 < 80 (short by 5.0)" in high.stdout
    junit = (tmp_path / "junit.xml").read_text()
    assert 'name="gameday.chain_head"' in junit and "sequence 1" in junit


def test_bad_score_options_are_bad_input(tmp_path: Path) -> None:
    directory = tmp_path / "j"
    _write(directory, [_journal(experiment="experiments/a.yaml", passed=True, days_ago=0,
                                tags=[])])
    env = cli_env(tmp_path)
    for options, words in ((["--weights", "critical=x"], "--weights: 'critical=x' is not"),
                           (["--half-life-days", "0"], "--half-life-days: must be > 0")):
        result = gameday_main(["score", str(directory), *options], env)
        assert result.returncode == 2 and words in result.stderr, result.stderr
        assert len(result.stderr.strip().splitlines()) == 1
    missing = gameday_main(["score", str(tmp_path / "none")], env)
    assert missing.returncode == 2 and "is not a directory of journals" in missing.stderr


def test_policy_defaults() -> None:
    assert Policy().weights == {"warning": 1.0, "critical": 3.0}
    assert Policy().half_life_days == 30.0


def test_the_score_is_pushed_to_a_real_pushgateway(tmp_path: Path) -> None:
    """``score --pushgateway``: the group ``score="resilience"`` on a real Pushgateway."""
    import urllib.request

    from tests.report.observability_helpers import pushgateway

    directory = tmp_path / "j"
    _write(directory, [_journal(experiment="experiments/a.yaml", passed=False, days_ago=0,
                                tags=["service:inference"])])
    gateway = pushgateway()
    try:
        result = gameday_main(["score", str(directory), "--pushgateway", gateway.url],
                         cli_env(tmp_path))
        assert result.returncode == 0 and "not published" not in result.stderr, result.stderr
        with urllib.request.urlopen(gateway.url + "/metrics", timeout=5) as answer:
            text = answer.read().decode()
    finally:
        gateway.close()
    samples = [(s.labels, s.value) for family in text_string_to_metric_families(text)
               if family.name == "gameday_resilience_score" for s in family.samples]
    assert any(labels.get("score") == "resilience" and labels.get("scope") == "overall"
               and value == 0.0 for labels, value in samples), samples


def test_a_services_file_groups_before_the_tags(tmp_path: Path) -> None:
    directory = tmp_path / "j"
    _write(directory, [
        _journal(experiment="experiments/inference-ecc.yaml", passed=True, days_ago=0,
                 tags=["service:other"]),
        _journal(experiment="experiments/train-kill.yaml", passed=False, days_ago=0,
                 tags=["service:training"])])
    services = tmp_path / "services.yaml"
    services.write_text("services:\n  serving: ['experiments/inference-*.yaml']\n")
    env = cli_env(tmp_path)
    result = gameday_main(["score", str(directory), "--services", str(services), "--output",
                      "json"], env)
    assert result.returncode == 0, result.stderr
    groups = {g["name"]: g["score"] for g in json.loads(result.stdout)["services"]}
    assert set(groups) == {"serving", "training"} and groups["training"] == 0
    services.write_text("services:\n  serving: [3]\n")
    bad = gameday_main(["score", str(directory), "--services", str(services)], env)
    assert bad.returncode == 2
    assert f"{services}:2: services.serving[0]: must be a glob" in bad.stderr, bad.stderr
