"""Playbooks, fault mixes and schedules: validation with file/line errors, seeded draws,
crontab lines and CronJob manifests checked against the Kubernetes client's models.

No Kubernetes cluster exists here: the CronJob is validated by deserializing it into the
real client's ``V1CronJob`` model (a stand-in for the API server's schema check).
"""

import random
from collections import Counter
from pathlib import Path

import pytest
import yaml

from gameday.errors import InvalidInput
from gameday.gamedays.faultmix import load_mix
from gameday.gamedays.playbook import load_playbook, load_requirements
from gameday.gamedays.schedule import (
    CronJobOptions,
    cronjob,
    cronjob_yaml,
    crontab_line,
    validate_cronjob,
)
from tests.conftest import BIN, REPO, cli_env, gameday_main

PLAYBOOKS = REPO / "playbooks"
FLAGSHIP = REPO / "experiments" / "gpu-ecc-dbe-reshard.yaml"


def _write(tmp_path: Path, text: str, name: str = "pb.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_shipped_playbooks_load() -> None:
    weekly = load_playbook(PLAYBOOKS / "weekly-gameday.yaml")
    assert weekly.draw is not None and weekly.draw.count == 3 and weekly.schedule is not None
    gate = load_playbook(PLAYBOOKS / "release-gate.yaml")
    assert {p.name: p.expect for p in gate.plan()}["silent-corruption"] == "fail"
    assert gate.gate.rto_max_s == 20 and gate.gate.min_ettr == 0.999
    audit = load_playbook(PLAYBOOKS / "audit-coverage.yaml")
    assert {r.cell[1] for r in audit.requirements} == {
        "device", "node", "container", "service", "network", "storage"}
    reference = load_requirements(PLAYBOOKS / "coverage" / "ai-infra-maturity.yaml")
    assert [(r.fault, r.layer, r.scenarios) for r in reference] == [
        ("node.cpu_hog", "node", 7), ("gpu.memory_leak", "container", 12),
        ("service.timeout", "service", 9)]


@pytest.mark.parametrize(("text", "where"), [
    ("title: t\nexperiments:\n  - path: nope.yaml\n", "pb.yaml:3: experiments[0].path: no such"),
    ("title: t\nexperiments:\n  - path: {flagship}\n    expect: maybe\n",
     "pb.yaml:4: experiments[0].expect: must be one of pass, fail"),
    ("title: t\nexperiments:\n  - path: {flagship}\nschedule:\n  cron: '61 * * * *'\n",
     "pb.yaml:5: schedule.cron: not a valid 5-field cron expression"),
    ("title: t\nexperiments:\n  - path: {flagship}\nschedule: {{cron: '0 1 * * *', "
     "timezone: Mars/Olympus}}\n", "pb.yaml:4: schedule.timezone: unknown time zone"),
    ("title: t\nexperiments:\n  - path: {flagship}\ngate:\n  rto_max: 3\n",
     "pb.yaml:5: gate.rto_max: unknown key"),
    ("title: t\nexperiments:\n  - path: {flagship}\ngate:\n  min_ettr: 2\n",
     "pb.yaml:5: gate.min_ettr: must be <= 1"),
    ("title: t\n", "pb.yaml: experiments: a playbook needs experiments"),
    ("title: t\nexperiments:\n  - path: {flagship}\n    name: a\n  - path: {flagship}\n"
     "    name: a\n", "pb.yaml:6: experiments[1].name: name 'a' is used twice"),
    ("title: t\ndraw: {{mix: {mix}, count: 3}}\n", "pb.yaml:2: draw.seed: is required"),
])
def test_playbook_errors_name_file_line_and_key(tmp_path: Path, text: str, where: str) -> None:
    path = _write(tmp_path, text.format(flagship=FLAGSHIP,
                                        mix=PLAYBOOKS / "fault-mix" / "llama3.yaml"))
    with pytest.raises(InvalidInput) as caught:
        load_playbook(path)
    message = str(caught.value)
    assert where in message, message
    assert "\n" not in message


def test_bad_experiment_in_playbook_is_named_and_cli_exits_2(tmp_path: Path) -> None:
    bad = _write(tmp_path, "title: t\ndescription: d\nmethod:\n  - type: action\n    name: x\n"
                           "    provider: {type: python, module: faults.gpu, func: ecc_error,"
                           " arguments: {kind: triple_bit}}\n", "bad.yaml")
    path = _write(tmp_path, f"title: t\nexperiments:\n  - path: {bad}\n")
    result = gameday_main(["play", str(path), "--journal-dir", str(tmp_path / "j")],
                     cli_env(tmp_path))
    assert result.returncode == 2, result.stdout + result.stderr
    assert "pb.yaml:3: experiments[0].path: experiment does not validate" in result.stderr
    assert "kind" in result.stderr and not (tmp_path / "j").exists()


def test_llama3_mix_carries_its_source_and_draws_reproducibly() -> None:
    mix = load_mix(PLAYBOOKS / "fault-mix" / "llama3.yaml")
    assert mix.source["title"] == "The Llama 3 Herd of Models"
    assert (mix.interruptions, mix.days, mix.gpus) == (419, 54, 16384)
    shares = {c.name: c.share for c in mix.categories}
    assert shares["Faulty GPU"] == 30.1 and shares["GPU HBM3 memory"] == 17.2
    assert shares["Silent data corruption"] == 1.4 and shares["CPU"] == 0.5
    assert sum(shares.values()) == pytest.approx(91.5)
    first = [d.experiment.path for d in mix.draw(5, seed=42)]
    assert first == [d.experiment.path for d in mix.draw(5, seed=42)]
    # The draw follows the shares among the categories that have an experiment.
    drawn = Counter(d.category for d in mix.draw(20_000, seed=1))
    total = mix.covered_share()
    for category in mix.drawable:
        assert drawn[category.name] / 20_000 == pytest.approx(category.share / total, abs=0.015)
    assert not any(drawn[c.name] for c in mix.uncovered())


def test_mix_errors_name_file_and_line(tmp_path: Path) -> None:
    path = _write(tmp_path, "title: m\nsource: {title: s}\ncategories:\n  - name: a\n"
                            "    share: 120\n    fault: gpu.ecc\n", "mix.yaml")
    with pytest.raises(InvalidInput, match=r"mix.yaml:5: categories\[0\].share: must be <= 100"):
        load_mix(path)


def test_crontab_line(tmp_path: Path) -> None:
    weekly = load_playbook(PLAYBOOKS / "weekly-gameday.yaml")
    line = crontab_line(weekly, repo=REPO, home=tmp_path / "home")
    fields = line.split(" ", 5)
    assert fields[:5] == ["0", "10", "*", "*", "3"]
    assert f"GAMEDAY_HOME={tmp_path / 'home'} {BIN / 'gameday'} play " in fields[5]
    assert f" {PLAYBOOKS / 'weekly-gameday.yaml'} " in fields[5] and "\\%Y" in fields[5]
    path = _write(tmp_path, f"title: t\nexperiments:\n  - path: {FLAGSHIP}\nschedule:\n"
                            f"  cron: '30 2 * * 1-5'\n  timezone: Europe/Paris\n")
    assert crontab_line(load_playbook(path), repo=REPO).startswith(
        "CRON_TZ=Europe/Paris\n30 2 * * 1-5 ")


def test_cronjob_manifest_fits_the_client_models() -> None:
    manifest = cronjob(load_playbook(PLAYBOOKS / "weekly-cluster.yaml"))
    job = validate_cronjob(manifest)
    assert job.spec.schedule == "0 10 * * 3" and job.spec.time_zone == "UTC"
    assert job.spec.concurrency_policy == "Forbid"
    container = job.spec.job_template.spec.template.spec.containers[0]
    assert container.command[:3] == ["gameday", "play", "playbooks/weekly-cluster.yaml"]
    broken = dict(manifest, spec={**manifest["spec"], "schedule": None})
    with pytest.raises(InvalidInput, match="does not fit the Kubernetes API"):
        validate_cronjob(broken)


def test_the_cronjob_is_exactly_what_the_client_models_make_of_it() -> None:
    """Built as plain data (the models cost seconds to import): every key must be one the
    models know, spelled as the API spells it, so the models' round trip changes nothing,
    for any options (random ones here)."""
    from kubernetes import client

    rng = random.Random(7)
    playbook = load_playbook(PLAYBOOKS / "weekly-cluster.yaml")
    for _ in range(20):
        word = "".join(rng.choice("abcdefghij-") for _ in range(rng.randint(1, 12)))
        options = CronJobOptions(namespace=f"ns{word}", image=f"registry/{word}:1",
                                 service_account=f"sa{word}", journals_claim=f"pvc{word}",
                                 workdir=f"/w/{word}", history=rng.randint(0, 50),
                                 tls_secret=f"tls{word}")
        manifest = cronjob(playbook, options)
        model = validate_cronjob(manifest)
        assert client.ApiClient().sanitize_for_serialization(model) == manifest
        assert yaml.safe_load(cronjob_yaml(playbook, options)) == manifest


def test_schedule_cli(tmp_path: Path) -> None:
    env = cli_env(tmp_path)
    result = gameday_main(["schedule", "playbooks/weekly-cluster.yaml", "--emit", "cronjob"], env)
    assert result.returncode == 0, result.stderr
    document = yaml.safe_load(result.stdout)
    assert document["kind"] == "CronJob" and document["apiVersion"] == "batch/v1"
    result = gameday_main(["schedule", "playbooks/weekly-gameday.yaml", "--emit", "cronjob"], env)
    assert (result.returncode, result.stdout) == (2, "")
    assert "weekly-gameday.yaml: target: runs on the embedded lab" in result.stderr
    result = gameday_main(["schedule", "playbooks/weekly-gameday.yaml", "--emit", "crontab"], env)
    assert result.returncode == 0, result.stderr
    assert f"GAMEDAY_HOME={env['GAMEDAY_HOME']} {BIN / 'gameday'} play " in result.stdout
    assert f"{env['GAMEDAY_HOME']}/logs/weekly-gameday.cron.log" in result.stdout
    result = gameday_main(["schedule", "playbooks/release-gate.yaml", "--emit", "crontab"], env)
    assert result.returncode == 2 and "release-gate.yaml: schedule: has no schedule" in \
        result.stderr


def _experiment(tmp_path: Path, name: str, func: str, marker: Path | None = None) -> Path:
    method = [{"type": "action", "name": func, "provider": {
        "type": "python", "module": "tests.fixtures.acts", "func": func}}]
    if marker is not None:
        method.append({"type": "action", "name": "mark", "provider": {
            "type": "python", "module": "tests.fixtures.acts", "func": "mark",
            "arguments": {"path": str(marker)}}})
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"title": name, "description": "d", "method": method}))
    return path


def test_stop_on_failure_skips_the_rest_and_the_gate_fails(tmp_path: Path) -> None:
    """Experiments without a target (plain toolkit semantics): no lab needed."""
    first = _experiment(tmp_path, "breaks", "fail")
    marker = tmp_path / "second-ran"
    second = _experiment(tmp_path, "would-pass", "ok", marker)
    playbook = _write(tmp_path, f"title: stop early\non_failure: stop\nexperiments:\n"
                                f"  - path: {first}\n  - path: {second}\n")
    env = cli_env(tmp_path)
    junit = tmp_path / "gate.xml"
    result = gameday_main(["gate", str(playbook), "--journal-dir", str(tmp_path / "j"),
                      "--junit", str(junit)], env)
    assert result.returncode == 1, result.stdout + result.stderr
    assert not marker.exists(), "the experiment after the failure must not run"
    assert "on_failure: stop" in result.stdout
    assert "gate: FAIL gameday.pb > would-pass: not run: skipped after an earlier failure" in \
        result.stdout
    assert "fault action 'fail' failed: could not inject" in result.stdout
    record = next((tmp_path / "j").glob("*.playbook.json"))
    outcomes = [run["outcome"] for run in yaml.safe_load(record.read_text())["runs"]]
    assert outcomes == ["failed", "skipped"]
    continuing = _write(tmp_path, f"title: keep going\nexperiments:\n  - path: {first}\n"
                                  f"  - path: {second}\n    name: second\n", "go.yaml")
    result = gameday_main(["play", str(continuing), "--journal-dir", str(tmp_path / "k")], env)
    assert result.returncode == 1 and marker.exists()
