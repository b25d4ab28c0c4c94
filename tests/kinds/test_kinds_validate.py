"""``gameday validate`` (in-process ``main``) refuses a shipped experiment spoiled where
only the kind's declaration can see it: a parameter of the wrong type, a value out of
bounds, a selector value of the wrong type, an unknown key one level down in a selector.
Each is one line with file, line and key path, exit 2."""

from pathlib import Path
from typing import Any

import pytest
import yaml

from gameday.cli.main import main
from tests.conftest import REPO


def _spoiled(tmp_path: Path, name: str, change: dict[str, Any]) -> Path:
    document = yaml.safe_load((REPO / "experiments" / name).read_text())
    for activity in document["method"]:
        if activity.get("type") == "action" and \
                activity["provider"]["module"].startswith("faults."):
            activity["provider"].setdefault("arguments", {}).update(change)
            break
    path = tmp_path / name
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


@pytest.mark.parametrize(("name", "change", "said"), [
    ("net-loss-node.yaml", {"percent": "lots"}, "arguments.percent: must be a number"),
    ("net-loss-node.yaml", {"port": 70000}, "arguments.port: must be <= 65535"),
    ("net-loss-node.yaml", {"link": {"node": 3}}, "arguments.link.node: must be a string"),
    ("process-kill-shard.yaml", {"process": {"name": "x", "parent": {"pidd": 1}}},
     "arguments.process.parent.pidd: unknown key"),
    ("storage-stall-weights.yaml", {"ops": ["read", 4]}, "arguments.ops[1]: must be a string"),
])
def test_validate_refuses_what_the_declaration_refuses(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str,
        change: dict[str, Any], said: str) -> None:
    path = _spoiled(tmp_path, name, change)
    assert main(["validate", str(path)]) == 2
    errors = capsys.readouterr().err
    line = next(line for line in errors.splitlines() if said in line)
    assert line.startswith(f"gameday: {path}:"), errors
