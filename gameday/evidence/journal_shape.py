"""The shape of a journal's ``gameday`` section, named once (:class:`GamedaySection`).

Written by ``gameday run`` (:func:`gameday.engine.runner.run`: every key but the chain's)
and, under ``chaos run``, by the control (:mod:`gameday.controls`: the run's facts
only, not the experiment's); the journal writer (:func:`gameday.evidence.journal.write_journal`)
adds the chain's links, the sequence number and the signer. The reports, game days
and the audit read it through :func:`gameday_section`.
"""

from collections.abc import Mapping
from typing import Any, TypedDict, cast

from gameday.evidence.ledger import FaultEntryJSON

__all__ = [
    "EnvironmentJSON",
    "ExtensionJSON",
    "GamedaySection",
    "SignerJSON",
    "SliJSON",
    "VerdictJSON",
    "VerifierResultJSON",
    "gameday_section",
]


class VerdictJSON(TypedDict):
    """The judge's verdict (``gameday.verdict``): what the exit code says, and why."""

    passed: bool
    exit_code: int
    status: str
    reasons: list[str]


class VerifierResultJSON(TypedDict):
    """One verifier's result (an item of ``gameday.verifiers``); ``passed`` is None for
    a measurement with no objective."""

    verifier: str
    name: str
    passed: bool | None
    reason: str
    measurement: dict[str, Any]
    at: float


class SliJSON(TypedDict):
    """The SLI recorder's samples (``gameday.sli``): each channel with its samples
    (``[t, ok, latency_ms, error?]``) and, for a value channel, ``values``."""

    started_at: float | None
    stopped_at: float | None
    channels: list[dict[str, Any]]


class ExtensionJSON(TypedDict):
    """The experiment's gameday extension as the run used it (``gameday.extension``)."""

    coverage: dict[str, str]
    slo: dict[str, Any]
    blast_radius: dict[str, Any]
    lease_s: float
    safeguards: list[dict[str, Any]]
    stop_on: str | None


class EnvironmentJSON(TypedDict):
    """Where the run ran (``gameday.environment``)."""

    host: str
    python: str
    gameday: str
    chaoslib: str
    argv: list[str]


class SignerJSON(TypedDict):
    """Who signed the journal (``gameday.signature``; the signature is beside it)."""

    algorithm: str
    public_key: str


class GamedaySection(TypedDict, total=False):
    """A journal's ``gameday`` section. Every key may be absent on reading: the control
    writes ``run_id``, ``verdict``, ``faults``, ``verifiers``, ``timeline`` and ``sli``;
    ``gameday run`` writes those and the rest but the chain's; the journal writer adds
    ``previous_sha256``, ``previous_journal``, ``sequence`` and (signed) ``signature``.
    A ``timeline`` event is ``t``, ``event`` and the event's own fields."""

    version: int
    run_id: str
    target: str
    target_source: str | None
    experiment_file: str
    extension: ExtensionJSON
    target_config: str | None
    faults: list[FaultEntryJSON]
    verifiers: list[VerifierResultJSON]
    timeline: list[dict[str, Any]]
    sli: SliJSON | None
    verdict: VerdictJSON
    environment: EnvironmentJSON
    previous_sha256: str | None
    previous_journal: str | None
    sequence: int
    signature: SignerJSON


def gameday_section(journal: Mapping[str, Any] | None) -> GamedaySection:
    """The ``gameday`` section of a parsed journal; empty when there is none (or it is
    not an object). Its values are what the file holds, unchecked: a reader of a journal
    it did not write checks the values it relies on (:func:`gameday.evidence.audit
    .verify` checks the chain, :func:`gameday.evidence.summary.summarize` the verdict)."""
    section = (journal or {}).get("gameday")
    return cast(GamedaySection, section) if isinstance(section, dict) else {}
