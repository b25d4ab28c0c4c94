"""Evidence that cannot be rolled back: an attacker with the directory but not the key.

Property tests over real files and real Ed25519 keys: random sequences of what such an
attacker can do (``tests.evidence.attacks``: delete journals, delete the newest and
write a new head, replay a head copied earlier, re-sign with their own key, recompute
the chain forward over an edit, swap journals, flip a byte). With the trusted key and an
anchor kept outside the directory, every change is detected; with the key alone, what
passes is a state the key really signed (a rollback, which only the anchor catches);
without a key, accidental edits are still caught.
"""

import tempfile
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gameday.evidence import audit
from gameday.evidence.journal import read_head
from tests.evidence.attacks import ATTACKS, Chain, attack, state

OURS = Ed25519PrivateKey.generate()
THEIRS = Ed25519PrivateKey.generate()
TRUSTED = OURS.public_key()

attacks = st.lists(st.tuples(st.sampled_from(ATTACKS), st.integers(0, 20), st.integers(0, 20)),
                   min_size=1, max_size=3)
SETTINGS = settings(max_examples=120, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


def _anchor(chain: Chain) -> audit.Anchor:
    head = read_head(chain.directory)
    assert head is not None and head.sequence is not None
    return audit.Anchor(expect_head=head.sha256, min_sequence=head.sequence)


def _only_authentic_counts(chain: Chain, result: audit.AuditResult) -> None:
    """A journal that verified is byte for byte one the key signed, at its own name."""
    now = state(chain.directory)
    for name in result.verified:
        assert now[name] == chain.honest[name], name


@SETTINGS
@given(count=st.integers(2, 5), steps=attacks)
def test_with_the_key_and_an_anchor_every_change_is_detected(
        count: int, steps: list[tuple[str, int, int]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        chain = Chain.write(Path(tmp), count, OURS)
        anchor = _anchor(chain)
        assert audit.verify(chain.directory, TRUSTED, anchor=anchor).ok
        for name, a, b in steps:
            attack(chain, name, a, b, THEIRS)
        result = audit.verify(chain.directory, TRUSTED, anchor=anchor)
        unchanged = state(chain.directory) == chain.honest
        assert result.ok == unchanged, (steps, result.problems)
        if not unchanged:
            assert result.line().startswith("audit: FAILED: ")
        _only_authentic_counts(chain, result)


@SETTINGS
@given(count=st.integers(2, 5), steps=attacks)
def test_with_the_key_only_a_state_the_key_signed_passes(
        count: int, steps: list[tuple[str, int, int]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        chain = Chain.write(Path(tmp), count, OURS)
        for name, a, b in steps:
            attack(chain, name, a, b, THEIRS)
        result = audit.verify(chain.directory, TRUSTED)
        if result.ok:  # only a rollback to a state the key signed is left undetected
            assert state(chain.directory) in chain.snapshots, steps
        _only_authentic_counts(chain, result)


@SETTINGS
@given(count=st.integers(2, 5), steps=st.lists(
    st.tuples(st.sampled_from(("delete", "swap", "flip-byte")), st.integers(0, 20),
              st.integers(0, 20)), min_size=1, max_size=3))
def test_without_a_key_accidents_are_still_caught(
        count: int, steps: list[tuple[str, int, int]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        chain = Chain.write(Path(tmp), count, OURS)
        for name, a, b in steps:
            attack(chain, name, a, b, THEIRS)
        result = audit.verify(chain.directory)
        assert result.ok == (state(chain.directory) == chain.honest), (steps, result.problems)


def test_the_named_attacks_are_named(tmp_path: Path) -> None:
    """Each attack of the issue, one at a time, and the line that names it."""
    expected = {
        "resign": "signed by a key other than the trusted public key",
        "delete-newest-rehead": ".chain-head",
        "replay-head": "anchor: the chain",
        "swap": "edited journal",
        "recompute-forward": "bad signature",
    }
    for name, words in expected.items():
        chain = Chain.write(tmp_path / name, 4, OURS)
        anchor = _anchor(chain)
        attack(chain, name, 0 if name == "replay-head" else 1, 2, THEIRS)
        if name == "delete-newest-rehead":  # signed by theirs
            attack(chain, "replay-head", 3, 0, THEIRS)
            attack(chain, name, 0, 1, THEIRS)
        result = audit.verify(chain.directory, TRUSTED, anchor=anchor)
        assert not result.ok and any(words in p for p in result.problems), (name, result.problems)
    chain = Chain.write(tmp_path / "rollback", 4, OURS)
    anchor = _anchor(chain)
    attack(chain, "delete-newest-rehead", 0, 0, THEIRS)  # unsigned new head
    result = audit.verify(chain.directory, TRUSTED, anchor=anchor)
    assert any(p.startswith("unsigned chain head: ") for p in result.problems), result.problems
    assert any(p.startswith("anchor: the chain head's sequence 3 is below the expected 4")
               for p in result.problems), result.problems


def test_the_cli_prints_the_head_and_checks_anchors(tmp_path: Path) -> None:
    """``audit verify``: the head to record on stderr (and in JSON), a rollback past the
    anchor exit 1 naming it, a malformed anchor exit 2 in one line."""
    import json

    from gameday.evidence import signing
    from tests.conftest import cli_env, gameday

    key = tmp_path / "k" / "audit.key"
    public = signing.generate(key)
    chain = Chain.write(tmp_path / "j", 3, signing.load_private(key))
    env = cli_env(tmp_path)
    verified = gameday(["audit", "verify", str(chain.directory), "--public-key", str(public)],
                       env)
    head = read_head(chain.directory)
    assert head is not None
    assert verified.returncode == 0
    assert verified.stderr.strip() == f"audit: head {head.sha256} sequence 3 (signed)"
    document = json.loads(gameday(["audit", "verify", str(chain.directory), "--output",
                                   "json"], env).stdout)
    assert document["head"] == {"sha256": head.sha256, "journal": head.journal,
                                "sequence": 3, "signed": True}
    anchored = ["audit", "verify", str(chain.directory), "--public-key", str(public),
                "--expect-head", head.sha256, "--min-sequence", "3"]
    assert gameday(anchored, env).returncode == 0
    # the attacker deletes the newest and restores the head they copied after run 2
    attack(chain, "delete", 2, 0, THEIRS)
    attack(chain, "replay-head", 1, 0, THEIRS)
    assert gameday(["audit", "verify", str(chain.directory), "--public-key", str(public)],
                   env).returncode == 0  # a state the key signed: only an anchor tells
    rolled = gameday(anchored, env)
    assert rolled.returncode == 1 and rolled.stdout.startswith("audit: FAILED: anchor: ")
    for bad, words in ((["--expect-head", "xyz"], "--expect-head: not a SHA-256"),
                       (["--min-sequence", "0"], "--min-sequence: must be at least 1")):
        result = gameday(["audit", "verify", str(chain.directory), *bad], env)
        assert result.returncode == 2 and words in result.stderr, result.stderr
        assert len(result.stderr.strip().splitlines()) == 1
