"""``gameday validate FILE...`` as a user runs it (real CLI subprocesses): every error of
every file, each ``file:line: key.path: message``; playbooks, target configurations and
requirement files recognised; ``--output json``."""

import json
import pathlib

from tests.conftest import gameday

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
    done = gameday(["validate", str(bad), str(other), str(FLAGSHIP)], env)
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
    done = gameday(["validate", str(path)], env)
    assert done.returncode == 2
    assert "${servce_url} is not defined (did you mean 'service_url'?)" in done.stderr
    assert gameday(["validate", str(path), "--var", "servce_url=http://x"], env).returncode == 0


def test_playbooks_target_configurations_and_requirement_files(tmp_path: pathlib.Path,
                                                              env: dict[str, str]) -> None:
    config = tmp_path / "target.yaml"
    config.write_text("allow:\n  nodez: [a]\n")
    required = tmp_path / "require.yaml"
    required.write_text("coverage:\n  require:\n    - {fault: gpu.ecc, layer: devise}\n")
    done = gameday(["validate", "playbooks/release-gate.yaml", str(config), str(required),
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
