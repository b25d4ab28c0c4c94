"""The metrics of results: what experiment runs showed, as Prometheus samples.

Built from journal summaries (``gameday.evidence.summary``), so ``gameday run``, ``play``
and ``gate`` export the same families (docs/observability.md). Every sample is
labelled with ``experiment`` (the experiment file's stem) and ``target``, plus
``fault_kind`` and ``layer`` (the coverage cell); ``gameday_verifier_passed`` adds
``verifier``, ``gameday_slo_seconds`` adds ``objective`` and ``gameday_journal_info``
adds the journal's ``sha256`` and file name (with ``gameday_journal_sequence``, the
chain head just written: what an auditor anchors). No run id or time is a
label: one series per experiment, overwritten by its next run. A value that was not
measured has no sample (never a zero that reads as "recovered instantly").

Two ways out: :func:`write_textfile` (node_exporter's textfile-collector convention,
written to a temporary file and renamed) and :class:`Pushgateway` (one push per
experiment, grouped by ``experiment`` and ``target``, so a game day's experiments do
not overwrite each other).
"""

import base64
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, write_to_textfile
from prometheus_client.exposition import (
    basic_auth_handler,
    default_handler,
    push_to_gateway,
    tls_auth_handler,
)

from gameday.errors import ObservabilityError
from gameday.evidence.summary import JournalSummary

if TYPE_CHECKING:
    from gameday.gamedays.score import Score

__all__ = ["BASE_LABELS", "Pushgateway", "ResultMetrics", "experiment_label",
           "score_registry", "write_score_textfile", "write_textfile"]

#: The labels of every family.
BASE_LABELS = ("experiment", "target", "fault_kind", "layer")
DEFAULT_JOB = "gameday"  # also gameday.cli.results.DEFAULT_JOB, the option's default

# summary attribute -> (family, help); each a gauge over BASE_LABELS
_MEASURED = (
    ("rto_s", "model_service_rto_seconds",
     "Recovery time objective measured: fault onset to the service healthy again."),
    ("rpo_records", "model_service_rpo_records",
     "Records lost: accepted minus committed stream offsets after recovery."),
    ("rto_s", "gameday_rto_seconds", "Fault onset to the SLI holding again (worst verifier)."),
    ("detect_s", "gameday_time_to_detect_seconds",
     "Fault onset to the system's own detection (alert, controller event)."),
    ("recover_s", "gameday_time_to_recover_seconds", "Detection to recovery."),
    ("rpo_steps", "gameday_rpo_steps", "Training steps lost (progress minus durable)."),
    ("rpo_s", "gameday_rpo_seconds", "Seconds of training lost."),
    ("reshard_s", "gameday_reshard_seconds", "Fault onset to the shard served elsewhere."),
)


def experiment_label(summary: JournalSummary) -> str:
    """The ``experiment`` label: the experiment file's stem, else the title as a slug."""
    if summary.experiment_file:
        return Path(summary.experiment_file).stem
    return re.sub(r"[^a-z0-9-]+", "-", summary.title.lower()).strip("-") or "experiment"


class ResultMetrics:
    """A private registry holding the metrics of the summaries :meth:`add` was given."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._measured = [(attribute, Gauge(name, doc, BASE_LABELS, registry=self.registry))
                          for attribute, name, doc in _MEASURED]
        self._slo = Gauge("gameday_slo_seconds", "The objective a time was judged against.",
                          (*BASE_LABELS, "objective"), registry=self.registry)
        self._hash = Gauge("gameday_prediction_hash_match",
                           "1 if every prediction-hash comparison matched the golden digest.",
                           BASE_LABELS, registry=self.registry)
        self._verifier = Gauge("gameday_verifier_passed",
                               "1 if every result of this verifier passed, else 0.",
                               (*BASE_LABELS, "verifier"), registry=self.registry)
        self._passed = Gauge("gameday_experiment_passed",
                             "1 if the experiment's verdict passed, else 0.", BASE_LABELS,
                             registry=self.registry)
        self._last_run = Gauge("gameday_experiment_last_run_timestamp_seconds",
                               "When the experiment's last run ended (Unix time).",
                               BASE_LABELS, registry=self.registry)
        self._faults = Counter("gameday_faults_injected",
                               "Faults the experiment's runs injected.", BASE_LABELS,
                               registry=self.registry)
        self._sequence = Gauge("gameday_journal_sequence",
                               "The run's journal's sequence number in its directory's hash "
                               "chain (an anchor for gameday audit verify --min-sequence).",
                               BASE_LABELS, registry=self.registry)
        self._journal = Gauge("gameday_journal_info",
                              "1, labelled with the run's journal's SHA-256 (an anchor for "
                              "gameday audit verify --expect-head) and file name.",
                              (*BASE_LABELS, "sha256", "journal"), registry=self.registry)
        self._journal_labels: dict[tuple[str, ...], tuple[str, ...]] = {}

    def add(self, summary: JournalSummary) -> None:
        """Set every family from one run (a later run of the same experiment overwrites)."""
        labels = (experiment_label(summary), summary.target or "none", summary.fault,
                  summary.layer)
        for attribute, gauge in self._measured:
            value = getattr(summary, attribute)
            if value is not None:
                gauge.labels(*labels).set(value)
        for objective, bound in sorted(summary.slo_s.items()):
            self._slo.labels(*labels, objective).set(bound)
        if summary.hash_match is not None:
            self._hash.labels(*labels).set(1 if summary.hash_match else 0)
        verdicts: dict[str, bool] = {}
        for line in summary.verifiers:
            if line.passed is not None:
                name = line.name or line.verifier
                verdicts[name] = verdicts.get(name, True) and bool(line.passed)
        for name, passed in sorted(verdicts.items()):
            self._verifier.labels(*labels, name).set(1 if passed else 0)
        self._passed.labels(*labels).set(1 if summary.passed else 0)
        self._last_run.labels(*labels).set(summary.ended_at)
        self._faults.labels(*labels).inc(summary.faults_injected)
        if summary.sequence is not None:
            self._sequence.labels(*labels).set(summary.sequence)
        if summary.sha256:
            previous = self._journal_labels.pop(labels, None)
            if previous is not None:  # one series per experiment: its latest journal
                self._journal.remove(*previous)
            current = (*labels, summary.sha256, Path(summary.path).name)
            self._journal.labels(*current).set(1)
            self._journal_labels[labels] = current


def score_registry(score: "Score") -> CollectorRegistry:
    """The resilience score (``gameday.gamedays.score``) as ``gameday_resilience_score``
    {scope: overall | service | cell, name} (0-100; a group with nothing to count has no
    sample) and ``gameday_resilience_score_weight`` (the weight it is out of)."""
    registry = CollectorRegistry(auto_describe=True)
    value = Gauge("gameday_resilience_score", "Resilience score (0-100) from verified "
                  "journals: severity-weighted, decayed by age, not-run counts as zero.",
                  ("scope", "name"), registry=registry)
    weight = Gauge("gameday_resilience_score_weight", "The total weight a score is out of.",
                   ("scope", "name"), registry=registry)
    rejected = Gauge("gameday_resilience_score_rejected_journals",
                     "Journals that did not verify: listed, never counted.", registry=registry)
    groups = [("overall", score.overall), *(("service", g) for g in score.services),
              *(("cell", g) for g in score.cells)]
    for scope, group in groups:
        if group.value is not None:
            value.labels(scope, group.name).set(group.value)
        weight.labels(scope, group.name).set(group.weight)
    rejected.set(len(score.rejected))
    return registry


def write_score_textfile(path: Path, score: "Score") -> None:
    """Write the score's metrics to ``path`` as :func:`write_textfile` writes results."""
    _write_registry(path, score_registry(score))


def write_textfile(path: Path, summaries: Iterable[JournalSummary]) -> None:
    """Write the metrics of ``summaries`` to ``path`` in the Prometheus text format, as
    node_exporter's textfile collector reads it (temporary file, then rename)."""
    metrics = ResultMetrics()
    for summary in summaries:
        metrics.add(summary)
    _write_registry(path, metrics.registry)


def _write_registry(path: Path, registry: CollectorRegistry) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_to_textfile(str(path), registry)
    except OSError as exc:
        raise ObservabilityError(f"{path}: cannot write the metrics file: "
                                 f"{exc.strerror or exc}") from None


Handler = Callable[[str, str, float | None, Sequence[tuple[str, str]], bytes],
                   Callable[[], None]]


@dataclass(frozen=True)
class Pushgateway:
    """Where and how to push: the gateway's URL, the job, basic auth and TLS (a client
    certificate and key, a CA bundle, or no verification), as prometheus_client offers."""

    url: str
    job: str = DEFAULT_JOB
    username: str | None = None
    password: str | None = None
    certfile: str | None = None
    keyfile: str | None = None
    cafile: str | None = None
    insecure_skip_verify: bool = False
    timeout_s: float = 10.0

    def _handler(self) -> Handler:
        basic = self.username is not None
        tls = self.certfile is not None

        def handler(url: str, method: str, timeout: float | None,
                    headers: Sequence[tuple[str, str]], data: bytes) -> Callable[[], None]:
            headers = list(headers)
            if basic and tls:  # both: the basic-auth header on the TLS handler's request
                token = f"{self.username}:{self.password or ''}".encode()
                headers.append(("Authorization", "Basic " + base64.b64encode(token).decode()))
            if tls:
                return tls_auth_handler(url, method, timeout, headers, data,
                                        str(self.certfile), str(self.keyfile or self.certfile),
                                        self.cafile,
                                        insecure_skip_verify=self.insecure_skip_verify)
            if basic:
                return basic_auth_handler(url, method, timeout, headers, data,
                                          self.username, self.password)
            return default_handler(url, method, timeout, headers, data)

        return handler

    def push(self, summary: JournalSummary) -> None:
        """Replace the experiment's group (``job``, ``experiment``, ``target``) with the
        metrics of this run; :class:`ObservabilityError` when the gateway refuses or is away."""
        metrics = ResultMetrics()
        metrics.add(summary)
        key = {"experiment": experiment_label(summary), "target": summary.target or "none"}
        self._push(metrics.registry, key, key["experiment"])

    def push_score(self, score: "Score") -> None:
        """Replace the group (``job``, ``score="resilience"``) with the score's metrics."""
        self._push(score_registry(score), {"score": "resilience"}, "the resilience score")

    def _push(self, registry: CollectorRegistry, key: dict[str, str], what: str) -> None:
        try:
            push_to_gateway(self.url, self.job, registry, grouping_key=key,
                            timeout=self.timeout_s, handler=self._handler())
        except OSError as exc:
            raise ObservabilityError(f"pushgateway {self.url}: cannot push {what}: "
                                     f"{exc}") from None
