"""``gameday gate --journals DIR``: a gate over journals that already exist (run in one CI
job, gated in another), through the real CLI on real hash-chained journal files. Only
verified journals count; the gate prints one verdict, its own."""

import json
from pathlib import Path

import yaml

from gameday.evidence import signing
from gameday.evidence.journal import write_journal
from tests.conftest import REPO, cli_env, gameday_main
from tests.report.reports_helpers import varied

ECC = REPO / "experiments" / "gpu-ecc-dbe-reshard.yaml"
KILL = REPO / "experiments" / "process-kill-shard.yaml"


def _playbook(tmp: Path) -> Path:
    path = tmp / "gate.yaml"
    path.write_text(yaml.safe_dump({
        "version": 1, "title": "release gate", "target": "lab",
        "experiments": [{"name": "ecc", "path": str(ECC)}, {"name": "kill", "path": str(KILL)}],
        "gate": {"rto_max_s": 20}}))
    return path


def _journals(directory: Path, key: Path | None = None) -> list[Path]:
    private = signing.load_private(key) if key else None
    paths = []
    for day, experiment in enumerate(("experiments/gpu-ecc-dbe-reshard.yaml",
                                      "experiments/process-kill-shard.yaml"), start=1):
        path = directory / f"2026110{day}T100000Z-{Path(experiment).stem}.json"
        write_journal(path, varied(experiment=experiment, fault="gpu.ecc",
                                   end=f"2026-11-0{day}T10:00:00+00:00"), private)
        paths.append(path)
    return paths


def test_the_gate_judges_existing_journals(tmp_path: Path) -> None:
    _journals(tmp_path / "journals")
    junit = tmp_path / "junit.xml"
    result = gameday_main(["gate", str(_playbook(tmp_path)), "--journals",
                           str(tmp_path / "journals"), "--junit", str(junit)], cli_env(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "game day:" not in result.stdout
    verdicts = [line for line in result.stdout.splitlines() if line.startswith("gate: ")]
    assert len(verdicts) == 1 and verdicts[0].startswith("gate: PASSED"), result.stdout
    assert 'failures="0"' in junit.read_text()


def test_an_edited_journal_fails_the_gate(tmp_path: Path) -> None:
    paths = _journals(tmp_path / "journals")
    document = json.loads(paths[1].read_text())
    document["gameday"]["verdict"]["passed"] = True
    paths[1].write_text(json.dumps(document, indent=2, sort_keys=True) + " \n")
    result = gameday_main(["gate", str(_playbook(tmp_path)), "--journals",
                           str(tmp_path / "journals")], cli_env(tmp_path))
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"gate: rejected {paths[1]}: edited journal" in result.stdout
    assert (f"gate: FAIL gameday.gate > kill: could not run: evidence rejected: its newest "
            f"journal {paths[1]} did not verify: edited journal") in result.stdout
    assert ("gate: FAIL gameday.gate.gate > evidence: every journal and chain verifies: evidence "
            "rejected: 2 journals did not verify") in result.stdout
    # what the edited journal recorded of its predecessor proves nothing either
    assert "unverifiable: older than the edited journal" in result.stdout
    assert result.stdout.strip().splitlines()[-1].startswith("gate: FAILED")


def test_journals_signed_by_another_key_fail_a_gate_that_trusts_one(tmp_path: Path) -> None:
    ours, theirs = tmp_path / "k" / "ours.key", tmp_path / "k" / "theirs.key"
    public = signing.generate(ours)
    signing.generate(theirs)
    _journals(tmp_path / "journals", theirs)
    env = cli_env(tmp_path)
    result = gameday_main(["gate", str(_playbook(tmp_path)), "--journals",
                           str(tmp_path / "journals"), "--public-key", str(public)], env)
    assert result.returncode == 1, result.stdout + result.stderr
    rejected = [line for line in result.stdout.splitlines() if line.startswith("gate: rejected")]
    assert len(rejected) == 2 and all("bad signature" in line for line in rejected), rejected


def test_a_directory_without_journals_is_bad_input(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    result = gameday_main(["gate", str(_playbook(tmp_path)), "--journals", str(tmp_path / "empty")],
                     cli_env(tmp_path))
    assert result.returncode == 2 and "holds no gameday journal" in result.stderr


def _failing_newest(directory: Path, key: Path) -> list[Path]:
    """ecc passed on day 1, kill passed on day 2, ecc failed on day 3 (the newest)."""
    private = signing.load_private(key)
    paths = _journals(directory, key)
    newest = directory / "20261103T100000Z-gpu-ecc-dbe-reshard.json"
    write_journal(newest, varied(experiment="experiments/gpu-ecc-dbe-reshard.yaml",
                                 passed=False, end="2026-11-03T10:00:00+00:00"), private)
    return [*paths, newest]


def test_the_gate_never_falls_back_to_an_older_run_when_the_newest_is_rejected(
        tmp_path: Path) -> None:
    """The attacks of the issue on a signed directory, through the real CLI: the newest
    (failing) journal re-signed by another key, and the newest deleted with the head
    rewritten; either way the gate fails and says why, never passing on the older run."""
    from tests.evidence.attacks import Chain, attack

    ours, theirs = tmp_path / "k" / "ours.key", tmp_path / "k" / "theirs.key"
    public = signing.generate(ours)
    signing.generate(theirs)
    env = cli_env(tmp_path)
    directory = tmp_path / "resigned"
    paths = _failing_newest(directory, ours)
    honest = gameday_main(["gate", str(_playbook(tmp_path)), "--journals", str(directory),
                      "--public-key", str(public)], env)
    assert honest.returncode == 1 and "gate: FAIL gameday.gate > ecc" in honest.stdout
    chain = Chain(directory, signing.load_private(ours))
    attack(chain, "resign", 2, 0, signing.load_private(theirs))  # the newest, now passing
    result = gameday_main(["gate", str(_playbook(tmp_path)), "--journals", str(directory),
                      "--public-key", str(public)], env)
    assert result.returncode == 1, result.stdout
    line = next(x for x in result.stdout.splitlines() if x.startswith(f"gate: rejected {paths[2]}"))
    assert "edited journal" in line or "bad signature" in line, line
    assert "could not run: evidence rejected: its newest journal" in result.stdout
    assert result.stdout.strip().splitlines()[-1].startswith("gate: FAILED")

    directory = tmp_path / "deleted"
    _failing_newest(directory, ours)
    chain = Chain(directory, signing.load_private(ours))
    for signer in (None, signing.load_private(theirs)):
        attack(chain, "delete-newest-rehead", 0, 0 if signer is None else 1,
               signing.load_private(theirs))
        result = gameday_main(["gate", str(_playbook(tmp_path)), "--journals", str(directory),
                          "--public-key", str(public), "--junit", str(tmp_path / "j.xml")],
                         env)
        assert result.returncode == 1, result.stdout
        assert "evidence: every journal and chain verifies" in result.stdout
        assert ("unsigned chain head" in result.stdout
                or "bad signature: .chain-head" in result.stdout), result.stdout
