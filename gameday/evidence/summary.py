"""The facts reports, gates and coverage need from one journal, read once.

A journal is the toolkit's journal plus the ``gameday`` section ``gameday run`` writes
(faults, verifier results, timeline, verdict, extension). ``summarize`` reduces it to a
``JournalSummary``; ``read_journal`` also hashes the exact bytes on disk, which is the
evidence the coverage matrix and the gate cite.
"""

import dataclasses
import datetime
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gameday.bounded import MAX_JSON_BYTES, decode_json, read_json, read_limited
from gameday.errors import InvalidInput
from gameday.evidence.journal_shape import gameday_section

UNKNOWN = "unknown"


@dataclass(frozen=True)
class VerifierLine:
    """One verifier result as the gate and the reports show it."""

    name: str
    verifier: str
    passed: bool | None
    reason: str


@dataclass
class JournalSummary:
    """What one experiment run showed."""

    path: str
    sha256: str
    title: str
    experiment_file: str
    fault: str
    layer: str
    passed: bool
    status: str
    exit_code: int
    ended_at: float
    reasons: list[str] = field(default_factory=list)
    duration_s: float = 0.0
    rto_s: float | None = None
    rto_slo_s: float | None = None
    rpo_s: float | None = None
    rpo_steps: float | None = None
    detect_s: float | None = None
    reshard_s: float | None = None
    injected_at: tuple[str, ...] = ()
    verifiers: list[VerifierLine] = field(default_factory=list)
    target: str = "none"
    target_source: str = ""
    host: str = ""

    @property
    def goodput(self) -> float | None:
        """The share of its baseline rate the job kept during the fault (the worst
        measured slowdown's complement); None when no throughput was measured."""
        return None if self.slowdown_pct is None else max(0.0, 1 - self.slowdown_pct / 100)

    @property
    def real(self) -> bool:
        """Whether the faults landed on a real target, not the virtual lab."""
        return self.target not in ("lab", "none") and "virtual" not in self.injected_at

    @property
    def target_label(self) -> str:
        """Where the evidence came from: ``lab (virtual)``, ``host NAME``, ``kubernetes CTX``."""
        if self.target == "lab":
            return "lab (virtual)"
        where = self.target_source or self.host
        return f"{self.target} {where}".strip()
    faults_injected: int = 0
    recover_s: float | None = None  # detection to recovery (else RTO minus detection)
    rpo_records: float | None = None  # records (messages) lost, from stream offsets
    hash_match: bool | None = None  # every prediction-hash comparison matched
    slo_s: dict[str, float] = field(default_factory=dict)  # objective -> bound in seconds
    sequence: int | None = None  # its place in its directory's hash chain
    slowdown_lost_s: float | None = None  # work a slowdown cost (throughput.degradation)
    slowdown_pct: float | None = None  # the worst slowdown a degradation measured
    slowdown_objective_pct: float | None = None  # its max_slowdown_pct, when it had one
    tags: tuple[str, ...] = ()  # the experiment's tags

    def to_json(self) -> dict[str, Any]:
        """Every field, as JSON (:func:`summary_from_json` reads it back)."""
        data = {name: getattr(self, name) for name in _FIELDS}
        data["verifiers"] = [vars(line).copy() for line in self.verifiers]
        data["reasons"], data["slo_s"] = list(self.reasons), dict(self.slo_s)
        return data

    @property
    def scenario(self) -> str:
        """What counts as one scenario in the coverage matrix: the experiment file."""
        return self.experiment_file or self.title


def _epoch(value: Any) -> float:
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str) and value:
        try:
            parsed = datetime.datetime.fromisoformat(value)
        except ValueError:
            return 0.0
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=datetime.UTC)
        return parsed.timestamp()
    return 0.0


def _layer_of(fault: str) -> str:
    from gameday.kinds import CATALOGUE

    kind = CATALOGUE.get(fault)
    return kind.coverage_layer if kind is not None else UNKNOWN


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _worst(current: float | None, value: float | None) -> float | None:
    if value is None:
        return current
    return value if current is None else max(current, value)


# measurement key -> summary field; rpo.checkpoint_loss reports lost_s / lost_steps
_MEASURES = (("rto_s", "rto_s"), ("rpo_s", "rpo_s"), ("lost_s", "rpo_s"),
             ("rpo_steps", "rpo_steps"), ("lost_steps", "rpo_steps"),
             ("time_to_detect_s", "detect_s"), ("time_to_reshard_s", "reshard_s"),
             ("time_to_recover_s", "recover_s"))
# throughput.degradation's own: its lost_s is work a slowdown cost (not work redone from
# a checkpoint) and its time_to_recover_s is back to pace (not detection to recovery)
_THROUGHPUT = "throughput.degradation"
_THROUGHPUT_MEASURES = (("lost_s", "slowdown_lost_s"), ("slowdown_pct", "slowdown_pct"))
# measurement key -> objective of gameday_slo_seconds
_SLO_KEYS = (("detect_slo_s", "detect"), ("reshard_slo_s", "reshard"),
             ("recover_slo_s", "recover"))


def summarize(journal: dict[str, Any], *, path: str = "", sha256: str = "") -> JournalSummary:
    """Reduce a journal (already parsed) to its summary; raise InvalidInput if it is not one."""
    gd = gameday_section(journal)
    verdict = gd.get("verdict")
    if not isinstance(verdict, dict):
        raise InvalidInput("not a gameday journal (no gameday.verdict section)", file=path or None)
    extension: Mapping[str, Any] = gd.get("extension") or {}
    environment: Mapping[str, Any] = gd.get("environment") or {}
    coverage = extension.get("coverage") or {}
    faults = gd.get("faults") or []
    fault = str(coverage.get("fault") or (faults[0].get("kind") if faults else "") or UNKNOWN)
    layer = str(coverage.get("layer") or _layer_of(fault))
    experiment = journal.get("experiment") or {}
    timeline = gd.get("timeline") or []
    ended = _epoch(journal.get("end")) or max((float(e.get("t", 0)) for e in timeline),
                                              default=0.0)
    summary = JournalSummary(
        path=path, sha256=sha256, title=str(experiment.get("title") or ""),
        experiment_file=str(gd.get("experiment_file") or ""), fault=fault, layer=layer,
        passed=bool(verdict.get("passed")), status=str(verdict.get("status") or ""),
        exit_code=int(verdict.get("exit_code", 1)), ended_at=ended,
        reasons=[str(r) for r in verdict.get("reasons") or []],
        duration_s=float(_number(journal.get("duration")) or 0.0),
        rto_slo_s=_number((extension.get("slo") or {}).get("rto_s")),
        injected_at=tuple(sorted({str(f.get("injected_at")) for f in faults})),
        target=str(gd.get("target") or "none"), target_source=str(gd.get("target_source") or ""),
        host=str(environment.get("host") or ""), faults_injected=len(faults),
        sequence=_sequence(gd.get("sequence")),
        tags=tuple(str(tag) for tag in experiment.get("tags") or () if isinstance(tag, str)))
    for result in gd.get("verifiers") or []:
        measurement = result.get("measurement") or {}
        verifier = str(result.get("verifier") or "")
        summary.verifiers.append(VerifierLine(
            name=str(result.get("name") or verifier), verifier=verifier,
            passed=result.get("passed"), reason=str(result.get("reason") or "")))
        for key, attribute in (_THROUGHPUT_MEASURES if verifier == _THROUGHPUT else _MEASURES):
            if key in measurement:
                setattr(summary, attribute, _worst(getattr(summary, attribute),
                                                   _number(measurement[key])))
        if "rto_s" in measurement and measurement.get("slo_s") is not None:
            summary.rto_slo_s = _number(measurement["slo_s"])
        _more_facts(summary, verifier, measurement, result.get("passed"))
    if summary.recover_s is None and summary.rto_s is not None and summary.detect_s is not None:
        summary.recover_s = round(max(0.0, summary.rto_s - summary.detect_s), 3)
    if summary.rto_slo_s is not None:
        summary.slo_s.setdefault("rto", summary.rto_slo_s)
    return summary


def _sequence(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


_FIELDS = tuple(f.name for f in dataclasses.fields(JournalSummary))
_FIELD_SET = frozenset(_FIELDS)
_LINE_FIELDS = frozenset(f.name for f in dataclasses.fields(VerifierLine))


def summary_from_json(data: dict[str, Any]) -> JournalSummary:
    """The summary :meth:`JournalSummary.to_json` wrote (a verified index keeps them).

    Built without the dataclasses' ``__init__`` (a warm index reads 10,000 of them per
    run; ``__init__`` of the frozen lines costs most of that), after checking that
    exactly the fields are there: :class:`ValueError` if not.
    """
    if data.keys() != _FIELD_SET:
        raise ValueError("not a journal summary")
    fields = dict(data)
    lines = []
    for line in fields["verifiers"] or ():
        if line.keys() != _LINE_FIELDS:
            raise ValueError("not a verifier line")
        made = object.__new__(VerifierLine)
        made.__dict__.update(line)
        lines.append(made)
    fields["verifiers"] = lines
    fields["injected_at"] = tuple(fields["injected_at"] or ())
    fields["tags"] = tuple(fields["tags"] or ())
    summary = object.__new__(JournalSummary)
    summary.__dict__.update(fields)
    return summary


def _more_facts(summary: JournalSummary, verifier: str, measurement: dict[str, Any],
                passed: Any) -> None:
    """The facts the metrics of results add: records lost, hash matches, SLO bounds."""
    if verifier == _THROUGHPUT:
        bound = _number(measurement.get("max_slowdown_pct"))
        if bound is not None:
            summary.slowdown_objective_pct = (bound if summary.slowdown_objective_pct is None
                                              else min(summary.slowdown_objective_pct, bound))
    if verifier == "rpo.stream_loss" and "lost" in measurement:
        summary.rpo_records = _worst(summary.rpo_records, _number(measurement["lost"]))
    if verifier.startswith("prediction_hash.") and passed is not None:
        matched = measurement.get("matched") is True and passed is True
        summary.hash_match = matched if summary.hash_match is None else (
            summary.hash_match and matched)
    if verifier.startswith("rpo.") and _number(measurement.get("slo_s")) is not None:
        summary.slo_s["rpo"] = float(measurement["slo_s"])
    for key, objective in _SLO_KEYS:
        bound = _number(measurement.get(key))
        if bound is not None:
            summary.slo_s[objective] = bound


def run_page(journal: Path) -> Path:
    """What a page links for one run: its own report beside the journal (``gameday
    report JOURNAL`` writes ``JOURNAL.html``) when that was rendered, else the journal."""
    page = journal.with_suffix(".html")
    return page if page.is_file() else journal


def read_journal(path: Path) -> tuple[dict[str, Any], JournalSummary]:
    """Read, hash and summarize one journal file."""
    data, journal = read_json(path, "JSON journal")
    if not isinstance(journal, dict):
        raise InvalidInput("not a gameday journal (not a JSON object)", file=str(path))
    return journal, summarize(journal, path=str(path), sha256=hashlib.sha256(data).hexdigest())


_DECODER = json.JSONDecoder()
_TOP_LEVEL = ("duration", "end", "gameday")  # in the order sort_keys writes them


def _top_level_sections(text: str) -> dict[str, Any] | None:
    """The few top-level values a summary needs, decoded without the toolkit's sections.

    Journals are written with sorted keys and two-space indentation (``journal.encode``),
    so each top-level key starts a line ``\\n  "key": ``; decoding just those values
    skips the large ``run``/``steady_states``/``experiment`` sections. Anything else
    (a hand-edited or foreign journal) returns None and is parsed whole.
    """
    if not text.startswith("{\n  \""):
        return None
    sections: dict[str, Any] = {}
    for key in _TOP_LEVEL:
        marker = f'\n  "{key}": '
        at = text.find(marker)
        if at < 0:
            continue
        try:
            sections[key], _ = _DECODER.raw_decode(text, at + len(marker))
        except ValueError:
            return None
    marker = '\n  "experiment": {'
    at = text.find(marker)
    end = text.find('\n  },', at) if at >= 0 else -1
    if end >= 0:
        experiment: dict[str, Any] = {}
        for key in ("tags", "title"):
            inner = f'\n    "{key}": '
            found = text.find(inner, at, end)
            if found >= 0:
                try:
                    experiment[key], _ = _DECODER.raw_decode(text, found + len(inner))
                except ValueError:
                    return None
        sections["experiment"] = experiment
    return sections if "gameday" in sections else None


def read_summary(path: Path) -> JournalSummary:
    """Hash and summarize one journal file, decoding only what the summary needs."""
    data = read_limited(path, MAX_JSON_BYTES, "a journal")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidInput("not a JSON journal (not UTF-8)", file=str(path)) from None
    sha256 = hashlib.sha256(data).hexdigest()
    try:
        sections = _top_level_sections(text)
    except RecursionError:
        sections = None  # decoded whole below, which names the problem
    if sections is None:
        sections = decode_json(text, str(path), "JSON journal")
        if not isinstance(sections, dict):
            raise InvalidInput("not a gameday journal (not a JSON object)", file=str(path))
    return summarize(sections, path=str(path), sha256=sha256)


def is_journal_file(path: Path) -> bool:
    """Journal files are ``*.json``, not hidden, and not a playbook run record."""
    return (path.suffix == ".json" and not path.name.startswith(".")
            and not path.name.endswith(".playbook.json"))
