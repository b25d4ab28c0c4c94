"""``--output json`` and the exit codes, through the real CLI: one JSON document on
stdout (errors included) whatever the exit code; 2 for usage and bad input, 1 for a
check that failed."""

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from gameday.experiment.loader import load_experiment
from gameday.kinds import CATALOGUE
from tests.conftest import REPO, cli_env, gameday, python_activity
from tests.report.reports_helpers import real_journal, varied, write

_SCHEMA_TYPES = {"integer", "number", "boolean", "string", "object", "array", "null"}


def _json(args: list[str], env: dict[str, str], code: int) -> Any:
    result = gameday(args, env)
    assert result.returncode == code, result.stdout + result.stderr
    return json.loads(result.stdout)


def test_faults_as_json_schema_and_one_kind(tmp_path: Path) -> None:
    env = cli_env(tmp_path)
    listed = _json(["faults", "--output", "json"], env, 0)["kinds"]
    assert [k["kind"] for k in listed] == list(CATALOGUE)
    for kind in listed:
        schema = kind["params"]
        assert schema["type"] == "object" and schema["additionalProperties"] is False
        assert set(schema["required"]) <= set(schema["properties"])
        for prop in schema["properties"].values():
            forms = prop.get("anyOf", [prop])  # a selector: a mapping, a name, or null
            types = [t for form in forms
                     for t in (form["type"] if isinstance(form["type"], list)
                               else [form["type"]])]
            assert set(types) <= _SCHEMA_TYPES and prop["description"]
            if "enum" in prop and "default" in prop:
                assert prop["default"] in prop["enum"]
    # every shipped experiment's fault arguments fit its kind's schema
    for path in sorted((REPO / "experiments").glob("*.yaml")):
        for activity in load_experiment(path).experiment.get("method") or []:
            provider = activity["provider"]
            kind = next((k for k in listed if k["activity"] ==
                         f"{provider['module']}.{provider['func']}"), None)
            if kind is not None:
                arguments = set(provider.get("arguments") or {})
                assert arguments <= set(kind["params"]["properties"]), path
                assert set(kind["params"]["required"]) <= arguments, path
    one = _json(["faults", "gpu.ecc", "--output", "json"], env, 0)
    assert one["kind"] == "gpu.ecc"
    assert one["params"]["properties"]["count"]["type"] == "integer"
    assert one["params"]["properties"]["xid"]["type"] == ["integer", "null"]  # nullable
    text = gameday(["faults", "gpu.ecc"], env)
    assert text.returncode == 0 and text.stdout.startswith("gpu.ecc ")
    assert "net.link_flap" not in text.stdout
    wrong = gameday(["faults", "gpu.ecx"], env)
    assert wrong.returncode == 2 and "did you mean gpu.ecc" in wrong.stderr
    error = _json(["faults", "gpu.ecx", "--output", "json"], env, 2)
    assert error["exit_code"] == 2 and "no fault kind 'gpu.ecx'" in error["error"]


def test_audit_verify_json_and_exits(tmp_path: Path) -> None:
    env = cli_env(tmp_path)
    journals = tmp_path / "journals"
    journals.mkdir()
    first = write(journals / "20261129T161300Z-a.json", real_journal())
    write(journals / "20261129T161400Z-b.json", varied())
    good = _json(["audit", "verify", str(journals), "--output", "json"], env, 0)
    assert (good["ok"], good["journals"], good["problems"]) == (True, 2, [])
    assert gameday(["audit", "verify", str(journals)], env).stdout == \
        "audit: OK: 2 journals, chain intact\n"
    first.write_text(first.read_text().replace('"passed": true', '"passed": false', 1))
    bad = _json(["audit", "verify", str(journals), "--output", "json"], env, 1)
    assert bad["ok"] is False and "edited journal" in bad["problems"][0]
    assert first.name in bad["rejected"]
    missing = gameday(["audit", "verify", str(tmp_path / "nonexistent")], env)
    assert missing.returncode == 2 and "nonexistent: is not a directory" in missing.stderr
    error = _json(["audit", "verify", "/nonexistent", "--output", "json"], env, 2)
    assert error == {"error": "/nonexistent: is not a directory of journals", "exit_code": 2}


def test_lab_status_json_without_a_lab_and_bad_lab_settings(tmp_path: Path) -> None:
    env = cli_env(tmp_path)
    lab = tmp_path / "lab"
    status = _json(["lab", "status", "--dir", str(lab), "--output", "json"], env, 1)
    assert status["status"] == "not running" and status["lab_dir"] == str(lab)
    assert "no lab runs" in status["error"] and status["exit_code"] == 1
    assert _json(["lab", "status", "--dir", str(lab), "--json"], env, 1) == status
    for bad in (["--nodes", "0"], ["--shards", "99"], ["--gpus-per-node", "17"]):
        result = gameday(["lab", "up", "--dir", str(lab), *bad], env)
        assert result.returncode == 2, result.stderr
        assert f"{bad[0]}: " in result.stderr and "must be between" in result.stderr
    result = gameday(["lab", "up", "--dir", str(lab)],
                     {**env, "GAMEDAY_PROMETHEUS": str(tmp_path / "no-prometheus")})
    assert result.returncode == 2 and "GAMEDAY_PROMETHEUS=" in result.stderr
    assert not lab.exists()


def _playbook(tmp_path: Path) -> Path:
    """Two experiments without a target (plain toolkit semantics: no lab): one passes,
    one fails as expected."""
    for name, func in (("passes", "ok"), ("fails", "fail")):
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump({
            "title": name, "description": "d", "method": [python_activity("action", func,
                                                                          func)]}))
    path = tmp_path / "pb.yaml"
    path.write_text(f"title: json game day\nexperiments:\n  - path: {tmp_path / 'passes.yaml'}"
                    f"\n  - path: {tmp_path / 'fails.yaml'}\n    expect: fail\n")
    return path


def test_play_and_gate_write_one_json_document_and_progress_on_stderr(tmp_path: Path) -> None:
    env = cli_env(tmp_path)
    playbook = _playbook(tmp_path)
    result = gameday(["play", str(playbook), "--journal-dir", str(tmp_path / "p"),
                      "--output", "json"], env)
    assert result.returncode == 0, result.stdout + result.stderr
    played = json.loads(result.stdout)
    assert [(r["name"], r["outcome"], r["as_expected"]) for r in played["runs"]] == [
        ("passes", "passed", True), ("fails", "failed", True)]
    assert played["exit_code"] == 0 and Path(played["record"]).exists()
    assert "playbook: json game day (2 experiments" in result.stderr
    result = gameday(["gate", str(playbook), "--journal-dir", str(tmp_path / "g"),
                      "--output", "json"], env)
    assert result.returncode == 0, result.stdout + result.stderr
    gate = json.loads(result.stdout)
    assert gate["passed"] is True and gate["exit_code"] == 0
    assert sorted(c["status"] for c in gate["cases"]) == ["passed", "xfail"]
    assert "gate: PASSED (1 passed, 0 failed, 1 expected failure)" in result.stderr
    missing = _json(["gate", str(tmp_path / "none.yaml"), "--output", "json"], env, 2)
    assert "cannot read" in missing["error"]


@pytest.mark.parametrize("argv", [
    ["validate", "--output", "json", "--bogus", "x.yaml"],
    ["faults", "--output=json", "gpu.ecc", "extra"],
    ["run", "--output", "json"],  # a subcommand's missing argument
    ["lab", "status", "--output", "json", "--nodes", "3"],
])
def test_usage_errors_under_output_json_are_one_json_document(
        argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    from gameday.cli.main import main

    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    document = json.loads(capsys.readouterr().out)
    assert document["exit_code"] == 2 and document["error"].startswith("gameday")


def test_lab_down_without_a_lab_says_so(tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    from gameday.cli.main import main

    assert main(["lab", "down", "--dir", str(tmp_path / "no-lab")]) == 0
    assert capsys.readouterr().out.startswith("no lab was running in ")


def test_a_lab_that_is_not_ready_in_time_names_what_it_waited_for(tmp_path: Path) -> None:
    """``lab up --timeout``: a real lab given half a second fails (exit 1) with one line
    naming the process it still waited for, and leaves no process behind."""
    from tests.conftest import lab_processes

    lab_dir = tmp_path / "lab"
    result = gameday(["lab", "up", "--dir", str(lab_dir), "--timeout", "0.5"], cli_env(tmp_path))
    assert result.returncode == 1, result.stderr
    first = result.stderr.splitlines()[0]
    assert "not ready within 0.5s: waiting for " in first and "(log: " in first, first
    assert lab_processes(lab_dir) == []
