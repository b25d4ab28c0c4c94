"""Typed variables: ``--var`` strings (and string configuration values) reach typed
parameters converted, and one that does not convert is refused at ``validate`` and at
``run`` before anything runs (exit 2, naming the key). Real CLI processes."""

import json
from pathlib import Path

import yaml

from tests.safety.safety_helpers import env_for, gameday


def _experiment(path: Path, configuration: dict[str, object] | None = None) -> Path:
    path.write_text(yaml.safe_dump({
        "version": "1.0.0", "title": "typed", "description": "typed variables",
        "configuration": configuration or {},
        "method": [
            {"type": "probe", "name": "types", "provider": {
                "type": "python", "module": "tests.fixtures.acts", "func": "typed",
                "arguments": {"port": "${port}", "ratio": "${ratio}",
                              "strict": "${strict}"}}},
            {"type": "action", "name": "ecc", "provider": {
                "type": "python", "module": "faults.gpu", "func": "ecc_error",
                "arguments": {"gpu": {"node": "node-0"}, "kind": "single_bit",
                              "count": "${count}"}}}]}, sort_keys=False))
    return path


def test_a_var_that_does_not_convert_is_refused_at_validate_and_run(tmp_path: Path) -> None:
    path = _experiment(tmp_path / "exp.yaml")
    env = env_for(tmp_path)
    good = ["--var", "port=8080", "--var", "ratio=0.5", "--var", "strict=yes",
            "--var", "count=1"]
    assert gameday(["validate", str(path), *good], env).returncode == 0
    bad = [*good, "--var", "port=eighty"]  # the last --var port wins
    for command in (["validate", str(path), *bad], ["run", str(path), *bad]):
        done = gameday(command, env)
        assert done.returncode == 2, done.stdout + done.stderr
        assert done.stderr.strip() == (
            f"gameday: {path}:13: method[0].provider.arguments.port: --var port is "
            "'eighty', not an integer as argument 'port' of tests.fixtures.acts.typed needs")
    assert not (tmp_path / "journals").exists()  # the run never began
    count = gameday(["validate", str(path), *good[:-2], "--var", "count=two"], env)
    assert count.returncode == 2
    assert "--var count is 'two', not an integer as argument 'count' of faults.gpu." \
           "ecc_error needs" in count.stderr
    zero = gameday(["validate", str(path), *good[:-2], "--var", "count=-1"], env)
    assert zero.returncode == 2 and "method[1].provider.arguments.count" in zero.stderr


def test_converted_values_reach_the_activity(tmp_path: Path) -> None:
    """String configuration values and --var values arrive as int, float and bool."""
    path = tmp_path / "typed.yaml"
    path.write_text(yaml.safe_dump({
        "version": "1.0.0", "title": "typed", "description": "typed variables",
        "configuration": {"port": "8080", "strict": {"type": "env", "key": "GD_STRICT"}},
        "method": [{"type": "probe", "name": "types", "provider": {
            "type": "python", "module": "tests.fixtures.acts", "func": "typed",
            "arguments": {"port": "${port}", "ratio": "${ratio}", "strict": "${strict}"}}}]}))
    journal = tmp_path / "journal.json"
    done = gameday(["run", str(path), "--var", "ratio=2", "--journal-path", str(journal)],
                   dict(env_for(tmp_path), GD_STRICT="false"))
    assert done.returncode == 0, done.stdout + done.stderr
    [probe] = json.loads(journal.read_text())["run"]
    assert probe["output"] == {"port": "int", "ratio": "float", "strict": "bool"}
