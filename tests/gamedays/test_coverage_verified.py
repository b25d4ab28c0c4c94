"""Coverage counts only verified evidence: real hash-chained journals on disk, tampered the
ways an auditor worries about (edited, deleted, reordered, re-signed with another key,
copied in from another directory), each rejected with its reason by the library and by the
real ``gameday coverage`` CLI. Also provenance, not-applicable cells, lab evidence kept
apart, and freshness of requirements."""

import hashlib
import json
import shutil
import time
from pathlib import Path

import pytest

from gameday.errors import InvalidInput
from gameday.evidence import signing
from gameday.evidence.journal import ChainHead, write_journal
from gameday.gamedays import coverage
from gameday.gamedays.playbook import Requirement
from tests.conftest import cli_env, gameday
from tests.report.reports_helpers import varied

JOURNALS = ("a.json", "b.json", "c.json", "d.json")


def _runs(directory: Path, key: Path | None = None, injected_at: str | None = None,
          **changes: object) -> list[Path]:
    private = signing.load_private(key) if key else None
    paths = []
    for day, name in enumerate(JOURNALS, start=1):
        journal = varied(experiment=f"experiments/ecc-{name[0]}.yaml",
                         end=f"2026-11-0{day}T10:00:00+00:00")
        journal["gameday"].update(changes)
        for fault in journal["gameday"]["faults"]:
            fault["injected_at"] = injected_at or fault["injected_at"]
        path = directory / name
        write_journal(path, journal, private)
        paths.append(path)
    return paths


def _counted(matrix: coverage.Matrix) -> set[str]:
    return {Path(path).name for cell in matrix.cells.values() for _, path in cell.evidence}


def _rejected(matrix: coverage.Matrix) -> dict[str, str]:
    return {Path(r.path).name: r.reason for r in matrix.rejected}


def test_an_intact_chain_counts_every_journal(tmp_path: Path) -> None:
    _runs(tmp_path / "j")
    matrix = coverage.build(tmp_path / "j")
    assert _counted(matrix) == set(JOURNALS) and not matrix.rejected


def test_an_edited_journal_and_everything_older_is_rejected(tmp_path: Path) -> None:
    paths = _runs(tmp_path / "j")
    document = json.loads(paths[2].read_text())
    document["gameday"]["verdict"]["passed"] = True
    document["end"] = "2026-11-30T00:00:00+00:00"
    paths[2].write_text(json.dumps(document, indent=2, sort_keys=True) + "\n")
    matrix = coverage.build(tmp_path / "j")
    assert _counted(matrix) == {"d.json"}
    rejected = _rejected(matrix)
    assert rejected["c.json"].startswith("edited journal: c.json")
    assert rejected["b.json"] == "unverifiable: older than the edited journal c.json"
    assert rejected["a.json"] == rejected["b.json"]


def test_a_deleted_journal_leaves_the_older_ones_unverifiable(tmp_path: Path) -> None:
    paths = _runs(tmp_path / "j")
    paths[1].unlink()
    matrix = coverage.build(tmp_path / "j")
    assert _counted(matrix) == {"c.json", "d.json"}
    assert _rejected(matrix) == {"a.json": "unverifiable: older than b.json is missing"}


def test_reordered_journals_are_rejected(tmp_path: Path) -> None:
    paths = _runs(tmp_path / "j")
    first, second = paths[1].read_bytes(), paths[2].read_bytes()
    paths[1].write_bytes(second)
    paths[2].write_bytes(first)
    matrix = coverage.build(tmp_path / "j")
    assert _counted(matrix) == {"d.json"}
    assert _rejected(matrix)["c.json"].startswith("edited journal: c.json")


def test_a_journal_copied_in_from_another_directory_is_rejected(tmp_path: Path) -> None:
    _runs(tmp_path / "j")
    other = _runs(tmp_path / "elsewhere")
    shutil.copy(other[0], tmp_path / "j" / "copied.json")
    matrix = coverage.build(tmp_path / "j")
    assert "copied.json" not in _counted(matrix)
    assert _rejected(matrix)["copied.json"] == "outside the chain"


def test_a_journal_re_signed_with_another_key_is_rejected(tmp_path: Path) -> None:
    ours, theirs = tmp_path / "keys" / "ours.key", tmp_path / "keys" / "theirs.key"
    trusted = signing.load_public(signing.generate(ours))
    signing.generate(theirs)
    paths = _runs(tmp_path / "j", ours)
    # the forger re-signs the newest journal with their own key (declaration and signature)
    document = json.loads(paths[3].read_text())
    forged = signing.load_private(theirs)
    document["gameday"]["signature"] = signing.declaration(forged)
    data = (json.dumps(document, indent=2, sort_keys=True) + "\n").encode()
    paths[3].write_bytes(data)
    signing.signature_path(paths[3]).write_bytes(signing.sign(forged, data))
    chain = tmp_path / "j" / ".chain-head"
    # the forger signs the head too, with their key: all they can do without ours
    head = ChainHead(hashlib.sha256(data).hexdigest(), paths[3].name, 4)
    chain.write_bytes(ChainHead(head.sha256, head.journal, 4,
                                signing.sign(forged, head.payload())).encode())
    assert "d.json" in _counted(coverage.build(tmp_path / "j"))  # no key: self-consistent
    matrix = coverage.build(tmp_path / "j", trusted=trusted)
    # a head the trusted key did not sign vouches for nothing: every journal is rejected,
    # the re-signed one for its own signature, every cell it names marked tampered
    assert _counted(matrix) == set()
    assert _rejected(matrix)["d.json"].startswith("bad signature: d.json")
    assert _rejected(matrix)["a.json"].startswith("unverifiable: bad signature: .chain-head")
    assert matrix.tampered_cells == {("gpu.ecc", "device"): 4}
    assert "tampered (4)" in coverage.to_markdown(matrix)
    assert "tampered" in coverage.to_html(matrix)


def test_the_cli_lists_rejected_journals_and_a_requirement_met_only_by_them_fails(
        tmp_path: Path) -> None:
    paths = _runs(tmp_path / "j")
    paths[3].write_text(paths[3].read_text().replace('"passed": true', '"passed": false', 1))
    requirement = tmp_path / "req.yaml"
    requirement.write_text("coverage:\n  require:\n    - {fault: gpu.ecc, layer: device, "
                           "scenarios: 1}\n")
    env = cli_env(tmp_path)
    result = gameday(["coverage", str(tmp_path / "j"), "--format", "json", "--require",
                      str(requirement)], env)
    assert result.returncode == 1, result.stderr
    assert f"coverage: rejected {paths[3]}: edited journal: d.json" in result.stderr
    assert "4 journals of this cell did not verify and were not counted" in result.stderr
    document = json.loads(result.stdout)
    assert document["journals"] == 0 and len(document["rejected"]) == 4


def test_a_directory_without_journals_is_an_error(tmp_path: Path) -> None:
    junk = tmp_path / "junk"
    junk.mkdir()
    (junk / "x.json").write_text('{"hello": 1}')
    with pytest.raises(InvalidInput, match="holds no gameday journal"):
        coverage.build(junk)
    result = gameday(["coverage", str(junk)], cli_env(tmp_path))
    assert result.returncode == 2
    assert "holds no gameday journal (1 other JSON files)" in result.stderr


def test_provenance_and_lab_evidence_kept_apart(tmp_path: Path) -> None:
    _runs(tmp_path / "lab")
    _runs(tmp_path / "host", injected_at="driver", target="host",
          target_source="http://gpu-7:9400")
    for path in (tmp_path / "host").glob("*.json"):
        assert json.loads(path.read_text())["gameday"]["target"] == "host"
    matrix = coverage.build(tmp_path, clock=lambda: 1_800_000_000.0)
    provenance = matrix.provenance()
    assert provenance["generated_at"] == "2027-01-15T08:00:00Z"
    assert provenance["directory"] == str(tmp_path)
    assert provenance["evidence_from"] == "2026-11-01T10:00:00Z"
    assert provenance["evidence_to"] == "2026-11-04T10:00:00Z"
    assert provenance["targets"] == {"host http://gpu-7:9400": 4, "lab (virtual)": 4}
    assert "targets: host http://gpu-7:9400 (4), lab (virtual) (4)" in matrix.scope_line()
    markdown = coverage.to_markdown(matrix)
    assert "| gpu.ecc | 8/8 |" in markdown  # real evidence present: no "(lab)" mark
    excluded = coverage.build(tmp_path, exclude_lab=True)
    assert excluded.journals == 4 and excluded.excluded_lab == 4
    lab_only = coverage.build(tmp_path / "lab")
    assert "| gpu.ecc | 4/4 (lab) |" in coverage.to_markdown(lab_only)
    real = Requirement("gpu.ecc", "device", 5, real=True)
    assert [f.line() for f in lab_only.check([real])] == [
        "missing: gpu.ecc at device level (real target): 0 of 5 required scenarios run"]


def test_cells_the_kind_cannot_act_on_are_not_applicable(tmp_path: Path) -> None:
    _runs(tmp_path / "j")
    matrix = coverage.build(tmp_path / "j")
    assert not matrix.applicable("gpu.ecc", "storage")
    assert matrix.applicable("gpu.oom", "container") and matrix.applicable("gpu.ecc", "device")
    row = next(line for line in coverage.to_markdown(matrix).splitlines()
               if line.startswith("| storage.stall |"))
    assert row == "| storage.stall | — | — | — | — | — | · |"
    assert ("GPU ECC error", "device", "gpu.ecc", 4) in matrix.audit_rows()
    html = coverage.to_html(matrix)
    assert "<dl class=legend>" in html and "id='cell-gpu-ecc-device'" in html
    assert "href='#cell-gpu-ecc-device'" in html and "white-space:nowrap" in html


def test_requirements_can_ask_for_fresh_evidence(tmp_path: Path) -> None:
    _runs(tmp_path / "j")
    now = time.mktime((2026, 11, 10, 10, 0, 0, 0, 0, 0)) - time.timezone
    matrix = coverage.build(tmp_path / "j", clock=lambda: now)
    fresh = Requirement("gpu.ecc", "device", 2, max_age_days=7.5)
    stale = Requirement("gpu.ecc", "device", 3, max_age_days=7.5)
    assert [f.line() for f in matrix.check([fresh, stale])] == [
        "missing: gpu.ecc at device level (within 7.5 days): 2 of 3 required scenarios run"]
