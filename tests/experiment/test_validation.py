"""Bad input gets one line naming file, key path and line, exit 2, and no traceback."""

from pathlib import Path

import pytest

from tests.conftest import REPO, gameday_main

GOOD_HEAD = """\
version: 1.0.0
title: t
description: d
"""


@pytest.mark.parametrize(("body", "expected"), [
    ("method:\n  - type: action\n    name: x\n    provider:\n      type: python\n"
     "      module: faults.gpu\n      func: ecc_error\n      arguments:\n"
     "        gpu: {holding_shard: 0}\n        kind: triple_bit\n",
     "exp.yaml:13: method[0].provider.arguments.kind: must be one of single_bit, double_bit, "
     "got 'triple_bit'"),
    ("method:\n  - type: action\n    name: x\n    provider:\n      type: python\n"
     "      module: faults.gpu\n      func: ecc_error\n      arguments:\n"
     "        gpu: {holding_shard: 0}\n        count: -3\n",
     "exp.yaml:13: method[0].provider.arguments.count: must be >= 0, got -3"),
    ("method:\n  - type: action\n    name: x\n    provider:\n      type: python\n"
     "      module: faults.gpu\n      func: ecc_eror\n",
     "exp.yaml:10: method[0].provider.func: module faults.gpu has no function 'ecc_eror'"),
    ("method:\n  - type: action\n    provider: {type: python, module: faults.gpu, "
     "func: revert}\n",
     "exp.yaml:5: method[0].name: is required"),
    ("extensions:\n  - name: gameday\n    slo: {rto_s: fast}\nmethod: []\n",
     "exp.yaml:6: extensions[0].slo.rto_s: must be a number, got 'fast'"),
    ("method: [\n", "exp.yaml"),
    ("extensions:\n  - name: gameday\n    coverage: {fault: gpu.oom, layer: device}\n"
     "method:\n  - type: action\n    name: x\n    provider:\n      type: python\n"
     "      module: faults.gpu\n      func: ecc_error\n      arguments:\n"
     "        gpu: {holding_shard: 0}\n",
     "exp.yaml:6: extensions[0].coverage.fault: gpu.oom is never injected by this "
     "experiment's actions (they inject: gpu.ecc)"),
    ("extensions:\n  - name: gameday\n    coverage: {fault: gpu.ecc, layer: storage}\n"
     "method:\n  - type: action\n    name: x\n    provider:\n      type: python\n"
     "      module: faults.gpu\n      func: ecc_error\n      arguments:\n"
     "        gpu: {holding_shard: 0}\n",
     "exp.yaml:6: extensions[0].coverage.layer: gpu.ecc cannot act at the storage layer "
     "(its layers: device)"),
])
def test_one_line_error_exit_2(tmp_path: Path, env: dict[str, str], body: str,
                               expected: str) -> None:
    path = tmp_path / "exp.yaml"
    path.write_text(GOOD_HEAD + body)
    for command in (["validate", str(path)], ["run", str(path), "--target", "none"]):
        result = gameday_main(command, env)
        assert result.returncode == 2, result.stdout + result.stderr
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1, result.stderr
        assert expected in lines[0]
        assert "Traceback" not in result.stderr


def test_missing_file(tmp_path: Path, env: dict[str, str]) -> None:
    result = gameday_main(["validate", str(tmp_path / "nope.yaml")], env)
    assert result.returncode == 2
    assert "nope.yaml: cannot read: No such file or directory" in result.stderr


def test_shipped_experiments_validate(env: dict[str, str]) -> None:
    experiments = sorted((REPO / "experiments").glob("*.yaml"))
    assert experiments
    result = gameday_main(["validate", *map(str, experiments)], env)
    # the Kubernetes experiment's service URL is a placeholder in its configuration
    assert result.returncode == 0, result.stderr
    given = gameday_main(["validate", *map(str, experiments), "--var", "service_url=http://x:80"],
                    env)
    assert given.returncode == 0, given.stderr
