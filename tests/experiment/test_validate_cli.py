"""``gameday validate FILE...`` as a user runs it (real CLI subprocesses): every error of
every file, each ``file:line: key.path: message``; playbooks, target configurations and
requirement files recognised; ``--output json``."""

import json
import pathlib

from tests.conftest import gameday_main

FLAGSHIP = pathlib.Path(__file__).resolve().parents[2] / "experiments/gpu-ecc-dbe-reshard.yaml"


def _line(path: pathlib.Path, needle: str) -> int:
    return next(n for n, text in enumerate(path.read_text().splitlines(), 1) if needle in text)


def test_every_error_of_every_file_with_did_you_mean(tmp_path: pathlib.Path,
                                                    env: dict[str, str]) -> None:
    text = FLAGSHIP.read_text()
    bad = tmp_path / "bad.yaml"
    bad.write_text(text.replace("steady-state-hypothesis:", "steady_state_hypothesis:")
                   .replace("holding_shard: 0", "holdin_shard: 0")
                   .replace("blast_radius:", "blast_radus:"))
    other = tmp_path / "vars.yaml"
    other.write_text(text.replace("target: lab", "target: host")
                     .replace("coverage: {fault: gpu.ecc", "coverage: {fault: gpu.oom")
                     .replace("${service_url}/predict", "${servce_url}/predict"))
    done = gameday_main(["validate", str(bad), str(other), str(FLAGSHIP)], env)
    assert done.returncode == 2, done.stdout
    out = done.stderr + done.stdout  # errors on stderr, one verdict per file on stdout
    assert (f"{bad}:{_line(bad, 'steady_state_hypothesis')}: steady_state_hypothesis: unknown "
            "key (did you mean 'steady-state-hypothesis'?)") in out
    assert (f"{bad}:{_line(bad, 'holdin_shard')}: method[0].provider.arguments.gpu."
            "holdin_shard: unknown key (did you mean 'holding_shard'?)") in out
    assert (f"{bad}:{_line(bad, 'blast_radus')}: extensions[0].blast_radus: unknown key "
            "(did you mean 'blast_radius'?)") in out
    assert f"{other}:{_line(other, 'coverage:')}: extensions[0].coverage.fault: gpu.oom is " \
           "never injected" in out
    line = _line(other, "${servce_url}")
    assert (f"{other}:{line}: steady-state-hypothesis.probes[0].provider.arguments.url: "
            "${servce_url} is not defined: set it in configuration or with --var "
            "servce_url=VALUE (target host offers none)") in out
    assert "${service_url}" not in out  # the lab offers it
    assert f"{FLAGSHIP}: experiment: valid" in out
    assert f"{bad}: experiment: 3 errors" in out and f"{other}: experiment: 4 errors" in out


def test_undefined_variables_count_var_and_the_target(tmp_path: pathlib.Path,
                                                      env: dict[str, str]) -> None:
    path = tmp_path / "typo.yaml"
    path.write_text(FLAGSHIP.read_text().replace("${service_url}/predict, p99",
                                                 "${servce_url}/predict, p99", 1)
                    .replace("url: \"${service_url}/predict\"", "url: \"${servce_url}/predict\""))
    done = gameday_main(["validate", str(path)], env)
    assert done.returncode == 2
    assert "${servce_url} is not defined (did you mean 'service_url'?)" in done.stderr
    fixed = gameday_main(["validate", str(path), "--var", "servce_url=http://x"], env)
    assert fixed.returncode == 0


def test_playbooks_target_configurations_and_requirement_files(tmp_path: pathlib.Path,
                                                              env: dict[str, str]) -> None:
    config = tmp_path / "target.yaml"
    config.write_text("allow:\n  nodez: [a]\n")
    required = tmp_path / "require.yaml"
    required.write_text("coverage:\n  require:\n    - {fault: gpu.ecc, layer: devise}\n")
    done = gameday_main(["validate", "playbooks/release-gate.yaml", str(config), str(required),
                    "--output", "json"], env)
    assert done.returncode == 2
    report = json.loads(done.stdout)
    kinds = {pathlib.Path(f["file"]).name: (f["kind"], f["valid"]) for f in report["files"]}
    assert kinds["release-gate.yaml"] == ("playbook", True)
    assert kinds["gpu-ecc-dbe-reshard.yaml"] == ("experiment", True)  # named by the playbook
    assert kinds["target.yaml"] == ("target configuration", False)
    assert kinds["require.yaml"] == ("requirements", False)
    errors = [e for f in report["files"] for e in f["errors"]]
    assert f"{config}:2: allow.nodez: unknown key" in errors[0]
    assert any(e.startswith(f"{required}:3: coverage.require[0].layer: must be one of")
               for e in errors)


def test_one_run_reports_every_mistake_of_a_playbook_mix_and_requirements(
        tmp_path: pathlib.Path, env: dict[str, str]) -> None:
    """Three or more mistakes per file come back from one run, each one line, in the
    file's line order; the exit code is 2 and nothing is run (no journal directory)."""
    playbook = tmp_path / "day.yaml"
    playbook.write_text(f"version: 1\ntitle: t\non_failure: sometimes\nexperiments:\n"
                        f"  - path: {FLAGSHIP}\n    expect: maybe\n    nmae: x\n"
                        "  - path: nowhere.yaml\n"
                        "schedule: {cron: '0 1 * *', timezone: Mars/Olympus}\n"
                        "gate: {rto_max_s: -1}\n")
    mix = tmp_path / "mix.yaml"
    mix.write_text("title: m\nsource: {title: s}\nwindow: {interruptions: 0}\ncategories:\n"
                   "  - name: a\n    share: 120\n    fault: GPU\n"
                   "  - share: 5\n    fault: gpu.ecc\n    experiments: [nope.yaml]\n")
    required = tmp_path / "require.yaml"
    required.write_text("title: r\ncoverage:\n  require:\n"
                        "    - {fault: gpu.ecc, layer: cosmic, scenarios: 0}\n"
                        "    - {layer: device, real: 3, colour: red}\n")
    done = gameday_main(["validate", str(playbook), str(mix), str(required)], env)
    assert done.returncode == 2, done.stdout
    errors = [line.removeprefix("gameday: ") for line in done.stderr.splitlines()]
    assert errors == [
        f"{playbook}:3: on_failure: must be one of continue, stop, got 'sometimes'",
        f"{playbook}:6: experiments[0].expect: must be one of pass, fail, got 'maybe'",
        f"{playbook}:7: experiments[0].nmae: unknown key (known: expect, name, path, "
        "variables)",
        f"{playbook}:8: experiments[1].path: no such experiment file 'nowhere.yaml' (paths "
        f"are relative to {tmp_path})",
        f"{playbook}:9: schedule.cron: not a valid 5-field cron expression: '0 1 * *'",
        f"{playbook}:9: schedule.timezone: unknown time zone 'Mars/Olympus' (use an IANA "
        "name such as UTC or Europe/Paris)",
        f"{playbook}:10: gate.rto_max_s: must be >= 0, got -1",
        f"{mix}:3: window.interruptions: must be >= 1, got 0",
        f"{mix}:6: categories[0].share: must be <= 100, got 120",
        f"{mix}:7: categories[0].fault: must be a fault kind such as gpu.ecc, got 'GPU'",
        f"{mix}:8: categories[1].name: is required",
        f"{mix}:10: categories[1].experiments[0]: no such experiment file 'nope.yaml' (paths "
        f"are relative to {tmp_path})",
        f"{required}:4: coverage.require[0].layer: must be one of device, node, container, "
        "service, network, storage, got 'cosmic'",
        f"{required}:4: coverage.require[0].scenarios: must be >= 1, got 0",
        f"{required}:5: coverage.require[1].colour: unknown key (known: fault, label, layer, "
        "max_age_days, real, scenarios)",
        f"{required}:5: coverage.require[1].real: must be true or false, got 3",
        f"{required}:5: coverage.require[1].fault: is required",
    ]
    assert done.stdout.splitlines() == [
        f"{playbook}: playbook: 7 errors",
        f"{FLAGSHIP}: experiment, named by {playbook}: valid",
        f"{mix}: fault mix: 5 errors", f"{required}: requirements: 5 errors"]
    played = gameday_main(["play", str(playbook), "--journal-dir", str(tmp_path / "j")], env)
    assert played.returncode == 2 and "on_failure: must be one of" in played.stderr
    assert not (tmp_path / "j").exists()
