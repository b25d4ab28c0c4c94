"""The journal's ``gameday`` section has the shape gameday/evidence/journal_shape.py names,
as both writers write it: ``gameday run`` (signed, so the journal writer's keys too) and
the control under the real ``chaos run``. Each run applies a fault through a real agent
over loopback HTTP (the docs' worked example's backend) and records verifier results, so
every nested shape is there to check; mypy checks the writers' code, this checks what
reaches the file (``vars()`` of the extension, the agents' answers)."""

import os
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from gameday import testing
from gameday.evidence import signing
from gameday.evidence.journal_shape import (
    EnvironmentJSON,
    ExtensionJSON,
    GamedaySection,
    SignerJSON,
    VerdictJSON,
    VerifierResultJSON,
    gameday_section,
)
from gameday.evidence.ledger import FaultEntryJSON
from tests.conftest import BIN, REPO, cli_env, read_json
from tests.docs.test_extending_example import EXAMPLES, EXPERIMENT, maintenance_example

#: What the control writes (``chaos run``); ``gameday run`` writes these and more.
CONTROL_KEYS = {"run_id", "verdict", "faults", "verifiers", "timeline", "sli"}
#: What the journal writer adds (a signed journal: ``signature`` too).
CHAIN_KEYS = {"previous_sha256", "previous_journal", "sequence", "signature"}


def keys(shape: Any) -> set[str]:
    """The keys a TypedDict names, required or not."""
    return set(shape.__required_keys__ | shape.__optional_keys__)


def shape_problems(section: Mapping[str, Any]) -> list[str]:
    """Where ``section`` differs from :class:`GamedaySection` and the shapes it holds."""
    problems = [f"gameday.{key}: not in GamedaySection"
                for key in sorted(set(section) - keys(GamedaySection))]
    nested: list[tuple[str, object, Any]] = [
        ("verdict", section.get("verdict"), VerdictJSON),
        ("extension", section.get("extension"), ExtensionJSON),
        ("environment", section.get("environment"), EnvironmentJSON),
        ("signature", section.get("signature"), SignerJSON),
        *((f"faults[{n}]", one, FaultEntryJSON) for n, one in
          enumerate(section.get("faults") or [])),
        *((f"verifiers[{n}]", one, VerifierResultJSON) for n, one in
          enumerate(section.get("verifiers") or []))]
    for where, value, shape in nested:
        if value is not None and (not isinstance(value, dict) or set(value) != keys(shape)):
            found = sorted(value) if isinstance(value, dict) else type(value).__name__
            problems.append(f"gameday.{where}: {found} is not {shape.__name__}")
    return problems


@pytest.fixture
def flag(tmp_path: Path) -> Path:
    return tmp_path / "maintenance"


@pytest.fixture
def service(flag: Path) -> Iterator[maintenance_example.HealthService]:
    with maintenance_example.HealthService(flag) as running:
        yield running


@pytest.fixture
def node(flag: Path) -> Iterator[testing.RunningAgent]:
    with testing.agent(maintenance_example.MaintenanceBackend(flag)) as running:
        yield running


def example_env(tmp_path: Path) -> dict[str, str]:
    env = cli_env(tmp_path)
    env["PYTHONPATH"] = os.pathsep.join([str(EXAMPLES), env["PYTHONPATH"]])
    return env


def test_gameday_run_writes_the_named_shape(tmp_path: Path, node: testing.RunningAgent,
                                            service: maintenance_example.HealthService
                                            ) -> None:
    key = tmp_path / "signing.key"
    signing.generate(key)
    journal_path = tmp_path / "journal.json"
    variables = {**node.variables(), "service_url": service.url}
    run = subprocess.run(
        [str(BIN / "gameday"), "run", str(EXPERIMENT), "--target", "host", "--sign-key",
         str(key), "--journal-path", str(journal_path),
         *(f"--var={name}={value}" for name, value in variables.items())],
        cwd=REPO, env=example_env(tmp_path), capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    section = gameday_section(read_json(journal_path))
    assert shape_problems(section) == []
    assert set(section) == keys(GamedaySection)  # every key: the run's, the chain's, signed
    [fault] = section["faults"]
    assert (fault["kind"], fault["via"], fault["revert_reason"]) == (
        "example.maintenance", "agent", "rollback")  # the experiment's rollbacks asked
    assert len(section["verifiers"]) == 3


def test_the_control_under_chaos_run_writes_the_named_shape(
        tmp_path: Path, node: testing.RunningAgent,
        service: maintenance_example.HealthService) -> None:
    document = yaml.safe_load(EXPERIMENT.read_text())
    document["controls"] = [{"name": "gameday",
                             "provider": {"type": "python", "module": "gameday.controls"}}]
    document["configuration"] = {**node.variables(), "service_url": service.url}
    path = tmp_path / "maintenance.yaml"
    path.write_text(yaml.safe_dump(document))
    journal_path = tmp_path / "chaos.json"
    run = subprocess.run(
        [str(BIN / "chaos"), "--no-version-check", "run", str(path), "--journal-path",
         str(journal_path)],
        cwd=REPO, env=example_env(tmp_path), capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    section = gameday_section(read_json(journal_path))
    assert shape_problems(section) == []
    assert set(section) == CONTROL_KEYS
    assert [f["kind"] for f in section["faults"]] == ["example.maintenance"]
    assert section["verdict"]["passed"] is True


def test_a_drifted_section_is_named_by_its_key_path() -> None:
    """The check above can fail: an unnamed key, a fault short of a key, a wrong type."""
    assert shape_problems({"verdict": {"passed": True}, "faults": [{"id": "f-1"}],
                           "environment": [], "extra": 1}) == [
        "gameday.extra: not in GamedaySection",
        "gameday.verdict: ['passed'] is not VerdictJSON",
        "gameday.environment: list is not EnvironmentJSON",
        "gameday.faults[0]: ['id'] is not FaultEntryJSON"]


@pytest.mark.parametrize("journal", [{}, {"gameday": None}, {"gameday": [1]}, None])
def test_a_journal_without_a_section_reads_as_an_empty_one(journal: Any) -> None:
    assert gameday_section(journal) == {}
