"""Evidence: hash-chained, signed journals and `gameday audit verify` against tampering;
secrets redacted from journals. Real files, real Ed25519 keys, the real CLI."""

import json
import shutil
from pathlib import Path

import pytest

from gameday.errors import InvalidInput
from gameday.evidence import audit, signing
from gameday.evidence.journal import CHAIN_FILE, write_journal
from gameday.evidence.redaction import REDACTED, experiment_secrets, scrub
from tests.safety.safety_helpers import env_for, gameday

TAMPER_CASES: list[str] = []


def _chain(directory: Path, count: int, key: Path | None = None) -> list[Path]:
    private = signing.load_private(key) if key else None
    paths = []
    for n in range(count):
        path = directory / f"2026010{n}T000000Z-run.json"
        write_journal(path, {"status": "completed", "run": [{"n": n}],
                             "gameday": {"verdict": {"passed": True}}}, private)
        paths.append(path)
    return paths


@pytest.fixture
def keys(tmp_path: Path) -> tuple[Path, Path]:
    key = tmp_path / "keys" / "audit.key"
    public = signing.generate(key)
    assert oct(key.stat().st_mode & 0o777) == "0o600"
    with pytest.raises(InvalidInput, match="already exists; not overwriting a key"):
        signing.generate(key)
    return key, public


def _verify(directory: Path, public: Path | None = None) -> audit.AuditResult:
    return audit.verify(directory, signing.load_public(public) if public else None)


def test_intact_chain_verifies_through_the_cli(tmp_path: Path, keys: tuple[Path, Path]) -> None:
    _chain(tmp_path / "j", 3, keys[0])
    result = gameday(["audit", "verify", str(tmp_path / "j"), "--public-key", str(keys[1])],
                     env_for(tmp_path))
    assert result.returncode == 0
    assert result.stdout.strip() == "audit: OK: 3 journals, chain intact, 3 signed"


def _edit(path: Path) -> None:
    document = json.loads(path.read_text())
    document["gameday"]["verdict"]["passed"] = False
    path.write_text(json.dumps(document, indent=2, sort_keys=True) + "\n")


def _tamper(name: str, paths: list[Path], directory: Path, keys: tuple[Path, Path],
            tmp: Path) -> str:
    """Apply one tampering; return the text the first problem must contain."""
    first, middle, last = paths
    if name == "edit-middle":
        _edit(middle)
        return f"edited journal: {middle.name}"
    if name == "edit-newest":
        _edit(last)
        return f"edited journal: {last.name}"
    if name == "edit-first":
        _edit(first)
        return f"edited journal: {first.name}"
    if name == "delete-middle":
        middle.unlink()
        return f"broken link: {middle.name} (recorded by {last.name}) is missing"
    if name == "delete-newest":
        last.unlink()
        return f"broken link: {last.name} (recorded by {CHAIN_FILE}) is missing"
    if name == "swap-contents":
        a, b = first.read_bytes(), middle.read_bytes()
        first.write_bytes(b)
        middle.write_bytes(a)
        return "edited journal:"
    if name == "forged-extra":
        (directory / "20251231T000000Z-forged.json").write_text('{"status": "completed"}')
        return "journal outside the chain: 20251231T000000Z-forged.json"
    if name == "head-rewritten":
        (directory / CHAIN_FILE).write_text(f"{'0' * 64} {last.name}\n")
        return f"edited journal: {last.name}"
    if name == "signature-removed":
        signing.signature_path(middle).unlink()
        return f"bad signature: {middle.name}: {middle.name}.sig is missing"
    if name == "signature-corrupted":
        sig = json.loads(signing.signature_path(middle).read_text())
        sig["signature"] = sig["signature"][::-1]
        signing.signature_path(middle).write_text(json.dumps(sig))
        return f"bad signature: {middle.name}"
    if name == "edited-and-resigned-with-other-key":
        other = tmp / "other.key"
        signing.generate(other)
        _edit(middle)
        private = signing.load_private(other)
        signing.signature_path(middle).write_bytes(signing.sign(private, middle.read_bytes()))
        return f"edited journal: {middle.name}"
    raise AssertionError(name)


CASES = ["edit-middle", "edit-newest", "edit-first", "delete-middle", "delete-newest",
         "swap-contents", "forged-extra", "head-rewritten", "signature-removed",
         "signature-corrupted", "edited-and-resigned-with-other-key"]


@pytest.mark.parametrize("case", CASES)
def test_every_tampering_is_detected_and_named(case: str, tmp_path: Path,
                                               keys: tuple[Path, Path]) -> None:
    directory = tmp_path / "j"
    paths = _chain(directory, 3, keys[0])
    intact = _verify(directory, keys[1])
    assert intact.ok, intact.problems
    expected = _tamper(case, paths, directory, keys, tmp_path)
    result = _verify(directory, keys[1])
    assert not result.ok and expected in result.problems[0], (case, result.problems)
    assert result.line().startswith("audit: FAILED: ") and "\n" not in result.line()
    TAMPER_CASES.append(case)


def test_untrusted_signer_is_named(tmp_path: Path, keys: tuple[Path, Path]) -> None:
    directory = tmp_path / "j"
    _chain(directory, 2, keys[0])
    other_public = signing.generate(tmp_path / "other.key")
    result = gameday(["audit", "verify", str(directory), "--public-key", str(other_public)],
                     env_for(tmp_path))
    assert result.returncode == 1
    assert "signed by a key other than the trusted public key" in result.stdout
    unsigned = tmp_path / "u"
    _chain(unsigned, 1)
    assert "not signed" in _verify(unsigned, keys[1]).problems[0]
    assert _verify(unsigned).ok


def test_chain_survives_a_copy_and_breaks_on_a_lost_head(tmp_path: Path) -> None:
    paths = _chain(tmp_path / "j", 2)
    shutil.copytree(tmp_path / "j", tmp_path / "copy")
    assert _verify(tmp_path / "copy").ok
    (tmp_path / "copy" / CHAIN_FILE).unlink()
    assert _verify(tmp_path / "copy").problems == [f"no {CHAIN_FILE} in {tmp_path / 'copy'}"]
    assert json.loads(paths[1].read_text())["gameday"]["previous_journal"] == paths[0].name


def test_secrets_are_redacted_everywhere() -> None:
    token = "gdsafe-planted-SECRET-7f3a9"
    experiment = {"secrets": {"prod": {"api": token}},
                  "configuration": {"agent_token": "other-secret-value", "url": "http://x"}}
    journal = {"experiment": experiment,
               "run": [{"output": f"called http://x?t={token} ok", "exception": [token]}],
               "gameday": {"environment": {"argv": ["--var", "agent_token=other-secret-value"]},
                           "authorization": "Bearer abc"}}
    clean = scrub(journal, experiment_secrets(experiment) | {"tok3n-from-agent"})
    text = json.dumps(clean)
    assert token not in text and "other-secret-value" not in text and "Bearer abc" not in text
    assert clean["experiment"]["configuration"]["url"] == "http://x"
    assert clean["run"][0]["output"] == f"called http://x?t={REDACTED} ok"
