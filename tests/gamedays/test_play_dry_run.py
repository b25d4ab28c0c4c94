"""``play --dry-run`` / ``gate --dry-run`` show the draw (experiments, order, seed) and run
nothing; ``--seed`` reproduces or changes a draw. Real CLI subprocesses on the shipped
playbooks; no lab is started (none may appear in the home directory)."""

import json
from pathlib import Path

from tests.conftest import cli_env, gameday_main

WEEKLY = "playbooks/weekly-gameday.yaml"


def _plan(args: list[str], tmp: Path) -> dict[str, object]:
    result = gameday_main([*args, "--dry-run", "--output", "json"], cli_env(tmp))
    assert result.returncode == 0, result.stderr
    document: dict[str, object] = json.loads(result.stdout)
    return document


def test_a_seed_draws_the_same_experiments_every_time(tmp_path: Path) -> None:
    first = _plan(["play", WEEKLY, "--seed", "7"], tmp_path)
    again = _plan(["gate", WEEKLY, "--seed", "7"], tmp_path)
    assert first["experiments"] == again["experiments"]
    assert first["draw"] == {"mix": "playbooks/fault-mix/llama3.yaml", "count": 3, "seed": 7}
    seeds = {json.dumps(_plan(["play", WEEKLY, "--seed", str(seed)], tmp_path)["experiments"])
             for seed in range(8)}
    assert len(seeds) > 1  # the seed is what picks them
    home = tmp_path / "home"  # nothing ran: no lab, no ledger, no lock, no journal
    assert {p.name for p in home.iterdir()} <= {"logs"} if home.exists() else True
    assert not (tmp_path / "journals").exists()


def test_the_text_plan_names_order_origin_and_seed(tmp_path: Path) -> None:
    result = gameday_main(["play", WEEKLY, "--dry-run", "--seed", "7"], cli_env(tmp_path))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].endswith("3 experiments in this order (dry run: nothing runs)")
    assert lines[1].startswith("  1. draw1-") and "[drawn: " in lines[1]
    assert "seed 7; the same seed draws the same experiments" in lines[-1]


def test_a_seed_for_a_playbook_without_a_draw_is_bad_input(tmp_path: Path) -> None:
    result = gameday_main(["gate", "playbooks/release-gate.yaml", "--dry-run", "--seed", "3"],
                     cli_env(tmp_path))
    assert result.returncode == 2
    assert "--seed: the playbook has no draw from a fault mix to seed" in result.stderr
