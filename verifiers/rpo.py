"""Recovery point objective: how much work a fault lost, from the system's own metrics.

Two measures, both read from Prometheus with PromQL expressions the experiment names:

- ``checkpoint_loss``: a training job that checkpoints. Work lost is the progress at the
  fault (the last value of ``progress`` before the job restarted) minus the progress it
  resumed from, in steps and in seconds of training at the pace before the fault. The
  defaults read the lab's trainer (``gameday_trainer_*``).
- ``stream_loss``: a Kafka-style stream. Work lost is, per series (e.g. per partition),
  the offset accepted (acknowledged to producers) at the fault minus the offset committed
  once the system settled after it.

Both record a typed result in the run session and fail with one line when the objective
(``slo.rpo_steps`` of the experiment, or the arguments) is missed.
"""

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gameday.activity import current, fail, record
from gameday.errors import GamedayError
from gameday.integrations.progress import PATTERNS as INTEGRATION_PATTERNS
from gameday.promql import PromQL, Series, series_key
from verifiers._promql import prometheus_url_of
from verifiers.checkpoints import Checkpoint, StoreHistory
from verifiers.progress import fault_onset, log_series, one_series, recorded_progress
from verifiers.redis_streams import GroupBacklog, group_backlog

__all__ = ["checkpoint_loss", "stream_loss"]

#: The lab trainer's expressions (see docs/lab.md, "The trainer").
LAB_PROGRESS = "max(gameday_trainer_step)"
LAB_DURABLE = "max(gameday_trainer_checkpoint_step)"
LAB_RESUMED = "max(gameday_trainer_resumed_from_step)"


@dataclass(frozen=True)
class Bound:
    """A figure known to lie in ``[low, high]``; exact when they are equal."""

    low: float
    high: float

    @property
    def exact(self) -> bool:
        return self.low == self.high

    @property
    def middle(self) -> float:
        return (self.low + self.high) / 2

    @property
    def resolution(self) -> float:
        """Half the width: the figure is ``middle ± resolution``."""
        return (self.high - self.low) / 2

    def text(self) -> str:
        if self.exact:
            return _number(self.low)
        return f"{_number(self.low)} to {_number(self.high)}"


@dataclass(frozen=True)
class CheckpointLoss:
    """Work a crash cost a checkpointing job, with the resolution each figure has."""

    onset: float
    progress_at_fault: Bound
    progress_seen_at: float  # when the last progress before the restart was seen
    durable_at_fault: float | None
    restarted_at: float  # when the restart was seen
    restart_signal: str
    resumed_from: Bound
    lost: Bound
    steps_per_s: float | None
    sources: dict[str, str]
    resumed_behind_durable: float  # durable steps the job failed to resume from

    @property
    def lost_s(self) -> float | None:
        if not self.steps_per_s:
            return None
        return round(self.lost.high / self.steps_per_s, 3)

    def to_json(self) -> dict[str, Any]:
        return {
            "onset": self.onset, "progress_at_fault": self.progress_at_fault.low,
            "progress_at_fault_max": self.progress_at_fault.high,
            "progress_seen_at": self.progress_seen_at,
            "durable_at_fault": self.durable_at_fault, "restarted_at": self.restarted_at,
            "restart_signal": self.restart_signal, "resumed_from": self.resumed_from.high,
            "resumed_from_min": self.resumed_from.low, "lost_steps": self.lost.middle,
            "lost_steps_min": self.lost.low, "lost_steps_max": self.lost.high,
            "resolution_steps": self.lost.resolution, "exact": self.lost.exact,
            "steps_per_s": self.steps_per_s, "lost_s": self.lost_s,
            "sources": dict(self.sources),
            "resumed_behind_durable": self.resumed_behind_durable}


def find_restart(progress: Series, onset: float, gap_s: float) -> int | None:
    """The index of the first sample of the restarted job after ``onset``: progress went
    down, or the series vanished for more than ``gap_s`` (the job was gone) and came
    back; None while neither happened."""
    samples = progress.samples
    for index in range(1, len(samples)):
        t, value = samples[index]
        previous_t, previous = samples[index - 1]
        if t < onset:
            continue
        if value < previous or t - previous_t > gap_s:
            return index
    return None


def changed_after(series: Series | None, onset: float) -> float | None:
    """The first instant after ``onset`` at which ``series`` took a value other than its
    last one before the onset (e.g. ``process_start_time_seconds`` of a new process)."""
    if series is None:
        return None
    earlier = [value for t, value in series.samples if t < onset]
    for t, value in series.samples:
        if t >= onset and (not earlier or value != earlier[-1]):
            return t
    return None


def _pace(before: list[tuple[float, float]], gap_s: float) -> float | None:
    """Steps per second over the job's last uninterrupted run before the restart; when
    that run shows no step (a scrape or two after a gap, e.g. on a loaded machine), the
    fastest of its earlier runs, so that a bound built on it stays a bound. None when no
    run moved at all."""
    runs: list[list[tuple[float, float]]] = []
    for sample in before:
        if runs and sample[1] >= runs[-1][-1][1] and sample[0] - runs[-1][-1][0] <= gap_s:
            runs[-1].append(sample)
        else:
            runs.append([sample])
    paces = [(run[-1][1] - run[0][1]) / (run[-1][0] - run[0][0]) for run in runs
             if len(run) >= 2 and run[-1][0] > run[0][0] and run[-1][1] > run[0][1]]
    if runs and paces and len(runs[-1]) >= 2 and runs[-1][-1][1] > runs[-1][0][1]:
        return paces[-1]
    return max(paces, default=None)


def _changes(samples: Sequence[tuple[float, float]]) -> list[tuple[float, float, float]]:
    """``(first seen, value, last seen of the value before)`` at each change of value:
    a range query repeats a scraped value at every step until the next scrape."""
    changes: list[tuple[float, float, float]] = []
    previous_t = samples[0][0] if samples else 0.0
    for t, value in samples:
        if not changes or value != changes[-1][1]:
            changes.append((t, value, previous_t))
        previous_t = t
    return changes


def _loaded_from_progress(after: list[tuple[float, float]],
                          before: list[tuple[float, float]], pace: float | None,
                          resolution_s: float) -> Bound | None:
    """The resumed-from step read off sampled progress after the restart: the first value
    from which progress moves as it did before the fault (values before a jump larger
    than twice the job's usual step between scrapes were taken before the job had
    loaded its checkpoint, e.g. an exporter showing step 0), bounded by the steps the
    job could have made between the scrape that last showed it not loaded and the one
    that showed the value."""
    earlier = _changes(before)
    steps = sorted(b[1] - a[1] for a, b in itertools.pairwise(earlier) if b[1] > a[1])
    gaps = sorted(b[0] - a[0] for a, b in itertools.pairwise(earlier) if b[1] > a[1])
    usual_step = steps[len(steps) // 2] if steps else None
    usual_gap = gaps[len(gaps) // 2] if gaps else None
    changes = _changes(after)
    for index in range(len(changes) - 1):
        (t, value, _), (_, next_value, _) = changes[index], changes[index + 1]
        step_up = next_value - value
        if step_up <= 0:
            continue
        if usual_step is not None and step_up > 2 * usual_step + 2:
            continue  # a jump: the job loaded its checkpoint between these two values
        if pace is None or usual_gap is None:
            return Bound(0.0, value)
        not_loaded_at = t - usual_gap - resolution_s
        if index > 0:
            not_loaded_at = max(not_loaded_at, changes[index - 1][0])
        # (a job's pace right after a restart is not its pace before: allow twice it)
        unseen = math.ceil(2 * pace * (t - not_loaded_at)) + 1
        return Bound(max(0.0, value - unseen), value)
    return None


def assess_checkpoint_loss(progress: Series, onset: float, *, gap_s: float,
                           resolution_s: float = 0.0, exact: bool = False,
                           step_every: int = 1, durable: Series | None = None,
                           resumed: Series | None = None,
                           restarts: Sequence[tuple[float, str]] = (),
                           durable_as_of: Callable[[float], float | None] | None = None,
                           sources: Mapping[str, str] | None = None,
                           resume_lines: bool = False) -> CheckpointLoss | None:
    """Fold the progress timeline and the other sources into the loss; None until the job
    has restarted and its resumed-from step is known.

    ``progress`` is exact (``exact``: a job log's steps, one line every ``step_every``
    steps) or sampled (PromQL range samples every ``resolution_s``); ``restarts`` are
    restart instants other sources saw (a new process start time, a log line);
    ``durable_as_of(t)`` answers the newest complete checkpoint at ``t`` (the store).
    With ``resume_lines``, ``resumed`` holds a job log's resume lines, events rather
    than a gauge: each after the onset is a restart, and it counts whether the job
    logged it before or after its first new step (frameworks log the resume first).
    """
    candidates = [(t, what) for t, what in restarts if t >= onset]
    index = find_restart(progress, onset, gap_s)
    if index is not None:
        t, value = progress.samples[index]
        previous = progress.samples[index - 1][1]
        candidates.append((t, "progress went down" if value < previous else
                           f"progress absent for over {gap_s:g} s"))
    if resume_lines:
        lines = [t for t, _ in (resumed.samples if resumed else ()) if t >= onset]
        if lines:
            candidates.append((lines[0], "resume log line"))
    elif (changed := changed_after(resumed, onset)) is not None and not exact:
        candidates.append((changed, "resumed-from changed"))
    if not candidates:
        return None
    restarted_at, signal = min(candidates)
    before = [sample for sample in progress.samples if sample[0] < restarted_at]
    after = [sample for sample in progress.samples if sample[0] >= restarted_at]
    if not before:
        return None
    seen_at, seen = before[-1]
    shown_at = seen_at  # when the last value first showed (its scrape, within resolution_s)
    for t, value in reversed(before):
        if value != seen:
            break
        shown_at = t
    pace = _pace(before, gap_s)
    # (no pace before the fault, e.g. the kill was the method's first action: bound the
    # unseen steps at twice the pace of the restarted job, as for its loading below)
    after_pace = _pace(after, gap_s) if pace is None else None
    bound_pace = pace if pace is not None else 2 * after_pace if after_pace else None
    durable_at_fault: float | None = None
    if durable_as_of is not None:
        durable_at_fault = durable_as_of(onset)
    elif durable is not None:
        earlier = [value for t, value in durable.samples if t < restarted_at]
        durable_at_fault = earlier[-1] if earlier else None
    low = max(seen, durable_at_fault if durable_at_fault is not None else seen)
    if exact:
        high = max(low, seen + step_every - 1)
    elif bound_pace is None:
        high = math.inf
    else:
        died_by = min(restarted_at, seen_at + resolution_s)
        high = max(low, seen + math.ceil(bound_pace * (died_by - shown_at + resolution_s))
                   + 1)
    at_fault = Bound(low, high)
    resumed_from: Bound | None = None
    later = [sample for sample in (resumed.samples if resumed else ()) if
             sample[0] >= restarted_at]
    moved = any(b[1] > a[1] for a, b in itertools.pairwise(after))
    if later and (moved or exact or resume_lines):
        resumed_from = Bound(later[-1][1], later[-1][1])
    elif resumed is None and durable_as_of is not None:
        newest = durable_as_of(restarted_at)
        if newest is not None:
            resumed_from = Bound(newest, newest)
    elif resumed is None and exact and after:
        first = after[0][1]
        resumed_from = Bound(max(0.0, first - step_every), first - 1)
    elif resumed is None:
        resumed_from = _loaded_from_progress(after, before,
                                             pace if pace is not None else after_pace,
                                             resolution_s)
    if resumed_from is None:
        return None
    lost = Bound(max(0.0, at_fault.low - resumed_from.high),
                 max(0.0, at_fault.high - resumed_from.low))
    behind = 0.0
    if durable_at_fault is not None and resumed_from.high < durable_at_fault:
        behind = durable_at_fault - resumed_from.high
    return CheckpointLoss(
        onset=onset, progress_at_fault=at_fault, progress_seen_at=seen_at,
        durable_at_fault=durable_at_fault, restarted_at=restarted_at,
        restart_signal=signal, resumed_from=resumed_from, lost=lost,
        steps_per_s=None if pace is None else round(pace, 4),
        sources=dict(sources or {}), resumed_behind_durable=behind)


def _number(value: float) -> str:
    if math.isinf(value):
        return "unbounded"
    return f"{value:g}" if float(value).is_integer() else f"{value:.1f}"


def _store_evidence(store: StoreHistory) -> dict[str, Any]:
    """What the scans of the checkpoint store saw: when they ran, and every complete
    checkpoint (kept after the framework pruned it)."""
    seen: list[Checkpoint] = sorted(store.seen.values(),
                                    key=lambda c: (c.completed_at, c.step))
    return {"store": store.root, "first_scan": min(store.scans, default=None),
            "last_scan": max(store.scans, default=None), "scans": len(store.scans),
            "checkpoints": [{"step": c.step, "path": c.path, "form": c.form,
                             "completed_at": c.completed_at} for c in seen]}


def _restarts_seen(expression: Series | None, lines: Series | None, onset: float) -> int:
    """How many times the job restarted after ``onset`` by the restart sources: the
    changes of the restart expression's value, or the restart log's lines."""
    changes = 0
    if expression is not None:
        values = [value for t, value in expression.samples if t >= onset]
        earlier = [value for t, value in expression.samples if t < onset]
        previous = earlier[-1] if earlier else None
        for value in values:
            changes += previous is not None and value != previous
            previous = value
    logged = sum(t >= onset for t, _ in lines.samples) if lines is not None else 0
    return max(changes, logged)


def _verdict(lost: Bound, slo: float | None) -> bool | None:
    """True when even the most that could be lost meets ``slo``, False when even the
    least misses it, None when the verdict hangs on the unknown part."""
    if slo is None:
        return None
    if lost.high <= slo:
        return True
    if lost.low > slo:
        return False
    return None


def checkpoint_loss(progress: str | None = LAB_PROGRESS, durable: str | None = LAB_DURABLE,
                    resumed: str | None = LAB_RESUMED, prometheus_url: str | None = None,
                    slo_steps: float | None = None, slo_s: float | None = None,
                    fault_kind: str | None = None, lookback_s: float = 120.0,
                    timeout_s: float = 60.0, interval_s: float = 0.5,
                    resolution_s: float = 0.25, gap_s: float = 1.5,
                    progress_log: dict[str, Any] | None = None, step_every: int = 1,
                    resumed_log: dict[str, Any] | None = None,
                    restart: str | None = None, restart_log: dict[str, Any] | None = None,
                    checkpoints: str | None = None,
                    progress_http: dict[str, Any] | None = None,
                    job_log: str | None = None) -> dict[str, Any]:
    """Measure the work a crash lost: progress at the fault minus progress resumed from,
    each from the most exact source given, each with its resolution.

    Progress at the fault: ``progress_log`` (``{"path": FILE, "pattern": REGEX, "tz":
    ZONE}``, the job's own log; the pattern's groups ``t`` (Unix seconds or ISO 8601; a
    time with no zone is read in ``tz``, default the host's local zone, as Python
    logging writes it) and ``step``; a logged step N means N steps done, one line every
    ``step_every`` steps): exact; or
    ``progress``, a PromQL expression (one series): the last value seen before the
    restart, so a bound — at most the steps the job makes at its pace before the fault
    between that scrape and its death go unseen; or ``progress_http`` (``{"url": URL,
    "field": JSON_PATH}``, the job's own HTTP/JSON progress endpoint, e.g. ``{"step":
    123}``): read from the run's SLI recorder, which must sample the same endpoint
    (the ``gameday`` control's ``sli: {progress: {url, field, interval_s}}``), so a
    bound the same way with the recorder's ``interval_s`` as the resolution (instead of
    ``resolution_s``); a reading that fails is the job being absent. With no moving
    reading before the fault (the kill was the method's first action), the steps
    unseen are bounded at twice the restarted job's pace.

    ``job_log``: the log a gameday integration writes inside the job
    (``gameday.integrations``: the HF ``Trainer`` and Lightning callbacks, the plain
    hook for torchrun scripts), standing for ``progress_log``, ``resumed_log`` and
    ``restart_log`` in its documented format.

    Durable progress at the fault: ``checkpoints``, the checkpoint store's directory
    (``verifiers.checkpoints``: DCP ``.metadata``, HF ``checkpoint-N`` with
    ``trainer_state.json``, Lightning ``step=N.ckpt`` and ``last.ckpt``, DeepSpeed
    ``global_stepN`` + ``latest``, Megatron ``iter_N`` +
    ``latest_checkpointed_iteration.txt``), the newest checkpoint complete at the fault;
    or ``durable`` (PromQL). The store is scanned at once and at every reading, and
    each checkpoint seen is kept, so one the framework prunes at its next save
    (``save_total_limit``, ``save_top_k``) still counts (``checkpoints_seen`` in the
    measurement). Progress at the fault is at least the durable progress.

    Resumed from: ``resumed_log`` (a log line naming the step the restarted job loaded,
    counted whether logged before or after its first new step), or ``resumed`` (PromQL
    gauge), read once the restarted job's progress moves; else
    the newest complete checkpoint at the restart in ``checkpoints``; else read off
    ``progress`` after the restart, skipping samples from before the job loaded its
    checkpoint (progress that then jumps faster than the job's pace).

    The restart: the first of ``restart`` (a PromQL expression whose value changes with
    each process, e.g. ``max(process_start_time_seconds{job="trainer"})``),
    ``restart_log`` (a line matching its pattern; group ``t`` only), a ``resumed_log``
    line, the ``resumed`` gauge changing, progress going down, or absent for more than
    ``gap_s`` s. Sources are read every ``interval_s`` until the restart and the resumed
    step are known, or ``timeout_s`` passes (PromQL ranges at ``resolution_s`` from
    ``lookback_s`` before the fault, the run's most recent fault or the most recent of
    kind ``fault_kind``).

    The objective is ``slo_steps`` (default: the experiment's ``slo.rpo_steps``) and
    optionally ``slo_s`` (at the pace before the fault). It is met when the most that
    could have been lost meets it, missed when the least misses it; otherwise the
    verdict is ``inconclusive`` and fails with the reason. Returns ``{"onset",
    "progress_at_fault", "progress_at_fault_max", "durable_at_fault", "restarted_at",
    "restart_signal", "resumed_from", "resumed_from_min", "lost_steps",
    "lost_steps_min", "lost_steps_max", "resolution_steps", "exact", "steps_per_s",
    "lost_s", "sources", "resumed_behind_durable", "slo_steps", "slo_s", "met",
    "verdict"}``; raises ``ActivityFailed`` with one line, e.g. ``rpo 63 steps > slo 50
    steps (missed by 13 steps; 15.8 s of training lost)``, ``inconclusive: rpo 0 to 24
    steps (12 ± 12) against slo 5 steps; ...`` or, for a crash loop the restart
    sources saw, ``job restarted 10 times within timeout 60 s after the fault and never
    resumed (...)``.
    """
    verifier = "rpo.checkpoint_loss"
    session = current()
    slo = slo_steps if slo_steps is not None else session.extension.slo.rpo_steps
    if job_log is not None:
        progress_log, resumed_log, restart_log = (
            {"path": job_log, "pattern": INTEGRATION_PATTERNS[use]}
            for use in ("progress", "resumed", "restart"))
    measurement: dict[str, Any] = {"progress": progress_log or progress, "durable":
                                   checkpoints or durable, "resumed": resumed_log or resumed,
                                   "slo_steps": slo, "slo_s": slo_s}
    client: PromQL | None = None
    try:
        if min(timeout_s, interval_s, resolution_s, gap_s) <= 0 or lookback_s <= 0 or \
                step_every < 1:
            raise GamedayError("need timeout_s, interval_s, resolution_s, gap_s and "
                               "lookback_s > 0 and step_every >= 1")
        if progress_log is None and progress is None and progress_http is None:
            raise GamedayError("needs progress (PromQL), progress_log or progress_http")
        if progress_http is not None and progress_log is None:
            _, resolution_s = recorded_progress(progress_http)
        taken = progress_log is not None or progress_http is not None
        if any(query for query in (None if taken else progress, durable
                                   if checkpoints is None else None,
                                   resumed if resumed_log is None else None, restart)):
            client = PromQL(prometheus_url_of(prometheus_url))
            measurement["prometheus_url"] = client.url
    except GamedayError as exc:
        fail(verifier, f"checkpoint_loss: {exc}", measurement)
    onset = fault_onset(fault_kind)
    if onset is None:
        fail(verifier, "checkpoint_loss needs a fault onset: no fault"
                       + (f" of kind {fault_kind}" if fault_kind else "")
                       + " was applied in this session", measurement)
    sources = {
        "progress": ("job log" if progress_log else
                     f"HTTP endpoint every {resolution_s:g} s (the run's recorder)"
                     if progress_http else f"PromQL every {resolution_s:g} s"),
        "durable": ("checkpoint store" if checkpoints else "PromQL" if durable else "none"),
        "resumed": ("job log" if resumed_log else "PromQL" if resumed else
                    "checkpoint store (newest complete at the restart)" if checkpoints
                    else "progress after the restart")}
    # (the store is scanned at once, at the fault, and at each reading after it, and
    # every checkpoint seen is kept: pruning at the next save cannot erase the evidence)
    store = None if checkpoints is None else StoreHistory(str(checkpoints))

    def durable_as_of(t: float) -> float | None:
        assert store is not None
        found = store.durable_at(t)
        return None if found is None else float(found.step)

    clock = session.clock
    deadline = clock.monotonic() + timeout_s
    loss: CheckpointLoss | None = None
    last: Series | None = None
    restart_count = 0
    while True:
        end = clock.now()
        start = onset - lookback_s
        try:
            def ranged(query: str | None, name: str, start: float = start,
                       end: float = end) -> Series | None:
                if query is None:
                    return None
                assert client is not None
                return one_series(client, query, start, end, resolution_s, name)

            if store is not None:
                store.observe(clock.now())
            last = (log_series(progress_log, "progress_log") if progress_log
                    else recorded_progress(progress_http)[0] if progress_http
                    else ranged(progress, "progress"))
            restarts: list[tuple[float, str]] = []
            expression = ranged(restart, "restart")
            changed = changed_after(expression, onset)
            if changed is not None:
                restarts.append((changed, "restart expression changed"))
            restart_lines = (None if restart_log is None else
                             log_series(restart_log, "restart_log", step=False))
            if restart_lines is not None:
                lines = [t for t, _ in restart_lines.samples if t >= onset]
                if lines:
                    restarts.append((lines[0], "restart log line"))
            restart_count = _restarts_seen(expression, restart_lines, onset)
            if last is not None:
                loss = assess_checkpoint_loss(
                    last, onset, gap_s=gap_s, resolution_s=resolution_s,
                    exact=progress_log is not None, step_every=step_every,
                    durable=None if checkpoints else ranged(durable, "durable"),
                    resumed=(log_series(resumed_log, "resumed_log") if resumed_log
                             else ranged(resumed, "resumed")),
                    restarts=restarts, durable_as_of=durable_as_of if store else None,
                    sources=sources, resume_lines=resumed_log is not None)
        except GamedayError as exc:
            fail(verifier, f"checkpoint_loss: {exc}", measurement)
        if loss is not None or clock.monotonic() >= deadline:
            break
        clock.sleep(min(interval_s, max(0.0, deadline - clock.monotonic())))
    measurement["onset"] = onset
    if store is not None:
        measurement["checkpoints_seen"] = _store_evidence(store)
    if loss is None:
        if last is not None and restart_count == 0 and \
                find_restart(last, onset, gap_s) is not None:
            restart_count = 1
        seen = ("no progress series at all" if last is None or not last.samples else
                f"progress last {_number(last.samples[-1][1])}")
        measurement["restarts_seen"] = restart_count
        if restart_count:
            fail(verifier, f"job restarted {restart_count} time"
                           f"{'s' if restart_count > 1 else ''} within timeout "
                           f"{timeout_s:g} s after the fault and never resumed ({seen}, no "
                           f"resumed step seen)", measurement)
        fail(verifier, f"job did not restart within timeout {timeout_s:g} s after the fault "
                       f"({seen}, no restart and resumed step seen)", measurement)
    met_steps = _verdict(loss.lost, slo)
    met_s = None
    if slo_s is not None and loss.steps_per_s:
        met_s = _verdict(Bound(loss.lost.low / loss.steps_per_s,
                               loss.lost.high / loss.steps_per_s), slo_s)
    verdicts = [verdict for verdict, wanted in ((met_steps, slo), (met_s, slo_s))
                if wanted is not None]
    met = (None if not verdicts else False if False in verdicts else
           None if None in verdicts else True)
    verdict = ("no objective" if not verdicts else "met" if met else "missed"
               if met is False else "inconclusive")
    result = {**loss.to_json(), "slo_steps": slo, "slo_s": slo_s, "met": met,
              "verdict": verdict}
    measurement.update(result)
    figure = (f"rpo {loss.lost.text()} steps" if loss.lost.exact else
              f"rpo {loss.lost.text()} steps ({_number(loss.lost.middle)} ± "
              f"{_number(loss.lost.resolution)})")
    seconds = (f"{loss.lost_s:.1f} s of training lost" if loss.lost_s is not None else
               "training time lost unknown: no pace before the fault")
    warning = (f"; warning: resumed {_number(loss.resumed_behind_durable)} steps behind the "
               f"last durable checkpoint" if loss.resumed_behind_durable else "")
    why = (f"progress from the {loss.sources['progress']}, resumed-from from the "
           f"{loss.sources['resumed']}")
    if verdict == "inconclusive":
        bound = f"slo {slo:g} steps" if met_steps is None and slo is not None else \
            f"slo {slo_s:g} s"
        fail(verifier, f"inconclusive: {figure} against {bound}; the verdict hangs on the "
                       f"unknown part ({why})", measurement)
    if met_steps is False and slo is not None:
        fail(verifier, f"rpo {loss.lost.text()} steps > slo {slo:g} steps (missed by "
                       f"{_number(loss.lost.low - slo)} steps; {seconds}){warning}",
             measurement)
    if met_s is False and slo_s is not None and loss.lost_s is not None:
        fail(verifier, f"rpo {loss.lost_s:.1f} s > slo {slo_s:g} s (missed by "
                       f"{loss.lost_s - slo_s:.1f} s; {loss.lost.text()} steps lost)"
                       f"{warning}", measurement)
    bound = f" <= slo {slo:g} steps" if slo is not None else " (no slo)"
    record(verifier, met, measurement,
           f"{figure}{bound} ({seconds}; resumed from {loss.resumed_from.text()}, "
           f"progress was {loss.progress_at_fault.text()}; {why}){warning}")
    return result


@dataclass(frozen=True)
class StreamLoss:
    """Offsets a fault lost: accepted at the fault minus committed after it, per series,
    with the resolution the accepted offsets' scrape interval gives."""

    onset: float
    settled_at: float
    lost: Bound
    resolution_s: float | None  # the accepted series' scrape interval; None: unknown
    per_series: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"onset": self.onset, "settled_at": self.settled_at,
                "lost": self.lost.middle, "lost_min": self.lost.low,
                "lost_max": self.lost.high, "exact": self.lost.exact,
                "resolution_s": self.resolution_s, "per_series": list(self.per_series)}


def _verdict_name(met: bool | None, slo: float | None) -> str:
    return ("no objective" if slo is None else "met" if met else "missed" if met is False
            else "inconclusive")


def _stream_verdict(lost: Bound, slo: float | None, detail: str,
                    measurement: dict[str, Any]) -> None:
    """Fail when ``lost`` misses ``slo`` or the verdict hangs on its unknown part
    (inconclusive), else record the result."""
    verifier = "rpo.stream_loss"
    met = _verdict(lost, slo)
    if slo is not None and met is None:
        fail(verifier, f"inconclusive: stream lost {lost.text()} messages against slo "
                       f"{slo:g}; the verdict hangs on the unknown part ({detail})",
             measurement)
    if slo is not None and met is False:
        fail(verifier, f"stream lost {lost.text()} messages > slo {slo:g} (missed by "
                       f"{_number(lost.low - slo)}; {detail})", measurement)
    bound = f" <= slo {slo:g}" if slo is not None else " (no slo)"
    record(verifier, met, measurement,
           f"stream lost {lost.text()} messages{bound} ({detail})")


def scrape_interval(samples: Sequence[tuple[float, float]]) -> float | None:
    """The scrape interval of a series read from range samples: the median spacing
    between the instants its value changed (a range query repeats each scraped value
    until the next scrape); None with fewer than two changes."""
    changes = _changes(samples)[1:]
    spacings = sorted(b[0] - a[0] for a, b in itertools.pairwise(changes))
    return spacings[len(spacings) // 2] if spacings else None


def accepted_at(samples: Sequence[tuple[float, float]], onset: float,
                interval_s: float | None) -> Bound | None:
    """The offset accepted at ``onset`` from a monotone series' range samples: at least
    the last scraped value at the onset, at most the value of the first scrape after it
    (the value once a scrape interval has passed; with no interval known, the latest);
    None when the series had no value at the onset."""
    before = [value for t, value in samples if t <= onset]
    if not before:
        return None
    after = [value for t, value in samples if t > onset]
    if interval_s is not None:
        after = [value for t, value in samples if t <= onset + interval_s] or after
    return Bound(before[-1], max(before[-1], after[-1] if after else before[-1]))


def _redis_stream_loss(spec: Mapping[str, Any], slo: float | None, *, fault_kind: str | None,
                       settle_s: float, timeout_s: float, interval_s: float) -> dict[str, Any]:
    verifier = "rpo.stream_loss"
    measurement: dict[str, Any] = {"redis": dict(spec), "slo_messages": slo}
    if not isinstance(spec, Mapping) or not {"url", "stream", "group"} <= set(spec):
        fail(verifier, 'stream_loss: redis must be {"url", "stream", "group"}', measurement)
    onset = fault_onset(fault_kind)
    if onset is None:
        fail(verifier, "stream_loss needs a fault onset: no fault was applied in this "
                       "session", measurement)
    clock = current().clock
    deadline = clock.monotonic() + timeout_s
    previous: GroupBacklog | None = None
    still_since = clock.monotonic()
    while True:
        try:
            backlog = group_backlog(str(spec["url"]), str(spec["stream"]), str(spec["group"]),
                                    onset)
        except GamedayError as exc:
            fail(verifier, f"stream_loss: {exc}", measurement)
        if backlog != previous:
            previous, still_since = backlog, clock.monotonic()
        if backlog.unacknowledged == 0 or clock.monotonic() - still_since >= settle_s or \
                clock.monotonic() >= deadline:
            break
        clock.sleep(interval_s)
    lost = float(backlog.unacknowledged)
    result = {"onset": onset, "settled_at": clock.now(), "lost": lost,
              "accepted": backlog.added, "committed": backlog.added - backlog.unacknowledged,
              "pending": backlog.pending, "undelivered": backlog.undelivered,
              "resolution_s": 0.001, "slo_messages": slo,
              "met": _verdict(Bound(lost, lost), slo),
              "verdict": _verdict_name(_verdict(Bound(lost, lost), slo), slo)}
    measurement.update(result)
    _stream_verdict(Bound(lost, lost), slo,
                    f"{backlog.stream}/{backlog.group}: {backlog.added} added by the fault, "
                    f"{backlog.pending} pending, {backlog.undelivered} never delivered",
                    measurement)
    return result


def _join_key(labels: dict[str, str], on: list[str] | None) -> str:
    kept = {key: value for key, value in labels.items()
            if key != "__name__" and (on is None or key in on)}
    return series_key(kept)


def stream_loss(accepted: str | None = None, committed: str | None = None,
                prometheus_url: str | None = None,
                slo_messages: float | None = None, on: list[str] | None = None,
                fault_kind: str | None = None, settle_s: float = 5.0,
                timeout_s: float = 60.0, interval_s: float = 0.5,
                redis: dict[str, Any] | None = None,
                lookback_s: float = 30.0) -> dict[str, Any]:
    """Measure the messages a fault lost: offsets accepted at the fault minus committed.

    From a Redis Streams consumer group, ``redis: {"url": "redis://HOST:PORT/DB",
    "stream": NAME, "group": NAME}`` instead of PromQL: the entries added to the stream
    by the fault (read from the stream's own millisecond ids, so exact) that the group
    has not acknowledged once it settles — pending with a consumer that crashed, or
    never delivered (``verifiers.redis_streams``).

    ``accepted`` is a PromQL expression for the offsets acknowledged to producers (e.g.
    a topic's log-end offset per partition), ``committed`` for the offsets made durable
    or processed (e.g. a consumer group's committed offset per partition). Series are
    joined on their labels (``on``: only these labels; default all but the name).

    ``accepted`` is read at the fault onset (the run's most recent fault, or the most
    recent of kind ``fault_kind``) from its scrapes: at least the last value scraped
    before the onset, at most the value of the first scrape after it, the scrape
    interval (``resolution_s``) read from the spacing of the series' changes over
    ``lookback_s`` before the fault. ``committed`` is then read every ``interval_s``
    until every series reaches its accepted offset or stops moving for ``settle_s``
    seconds (or ``timeout_s`` passes). Lost = the sum over series of ``accepted -
    committed`` where positive, a bound ``[lost_min, lost_max]``. The objective is
    ``slo_messages`` (default: the experiment's ``slo.rpo_steps``): met when even
    ``lost_max`` meets it, missed when even ``lost_min`` misses it, else
    ``inconclusive`` (a failure with the reason).

    Returns ``{"onset", "settled_at", "lost", "lost_min", "lost_max", "exact",
    "resolution_s", "per_series": [{"series", "accepted", "accepted_max", "committed",
    "lost", "lost_max"}], "slo_messages", "met", "verdict"}``; raises ``ActivityFailed``
    with one line, e.g. ``stream lost 120 messages > slo 0 (missed by 120;
    {partition="3"} lost 120; accepted scraped every 1 s)``.
    """
    verifier = "rpo.stream_loss"
    session = current()
    slo = slo_messages if slo_messages is not None else session.extension.slo.rpo_steps
    if redis is not None:
        return _redis_stream_loss(redis, slo, fault_kind=fault_kind, settle_s=settle_s,
                                  timeout_s=timeout_s, interval_s=interval_s)
    measurement: dict[str, Any] = {"accepted": accepted, "committed": committed,
                                   "slo_messages": slo}
    try:
        if accepted is None or committed is None:
            raise GamedayError("needs accepted and committed (PromQL), or redis")
        if min(timeout_s, interval_s, lookback_s) <= 0 or settle_s < 0:
            raise GamedayError("need timeout_s, interval_s, lookback_s > 0 and settle_s >= 0")
        client = PromQL(prometheus_url_of(prometheus_url))
    except GamedayError as exc:
        fail(verifier, f"stream_loss: {exc}", measurement)
    measurement["prometheus_url"] = client.url
    onset = fault_onset(fault_kind)
    if onset is None:
        fail(verifier, "stream_loss needs a fault onset: no fault was applied in this "
                       "session", measurement)
    clock = session.clock
    step_s = 0.1
    try:
        # (at least a few scrapes before the onset, to read the scrape interval)
        seen = {_join_key(dict(one.labels), on): one.samples for one in client.range(
            accepted, onset - lookback_s, max(onset, clock.now()), step_s)}
    except GamedayError as exc:
        fail(verifier, f"stream_loss: {exc}", measurement)
    if not any(t <= onset for samples in seen.values() for t, _ in samples):
        fail(verifier, f"stream_loss: accepted {accepted!r} had no series at the fault",
             measurement)
    at_onset = {key: [value for t, value in samples if t <= onset][-1]
                for key, samples in seen.items() if samples and samples[0][0] <= onset}
    intervals = [found for found in map(scrape_interval, seen.values()) if found is not None]
    interval = max(intervals) if intervals else None
    # the first scrape after the onset shows at the latest by then (jitter allowed)
    horizon = onset + (1.5 * interval + step_s if interval is not None else settle_s)
    deadline = clock.monotonic() + timeout_s
    last_committed: dict[str, float] = {}
    still_since: dict[str, float] = {}
    started = clock.monotonic()  # (a series with no committed offset is still since then)
    while True:
        try:
            now_committed = {_join_key(dict(labels), on): value
                             for labels, value in client.instant(committed)}
        except GamedayError as exc:
            fail(verifier, f"stream_loss: {exc}", measurement)
        now = clock.monotonic()
        for key, value in now_committed.items():
            if last_committed.get(key) != value:
                last_committed[key], still_since[key] = value, now
        # each series reached its accepted offset, or stopped moving for settle_s
        settled = all(now_committed.get(key, float("-inf")) >= value or
                      now - still_since.get(key, started) >= settle_s
                      for key, value in at_onset.items())
        if now >= deadline or (settled and clock.now() >= horizon):
            break
        clock.sleep(interval_s)
    try:
        seen = {_join_key(dict(one.labels), on): one.samples for one in client.range(
            accepted, onset - lookback_s, clock.now(), step_s)}
    except GamedayError as exc:
        fail(verifier, f"stream_loss: {exc}", measurement)
    per_series: list[dict[str, Any]] = []
    for key, samples in sorted(seen.items()):
        bound = accepted_at(samples, onset, None if interval is None else
                            horizon - onset)
        if bound is None:
            continue  # (a series that appeared after the fault accepted nothing before it)
        got = now_committed.get(key)
        lost = Bound(bound.low if got is None else max(0.0, bound.low - got),
                     bound.high if got is None else max(0.0, bound.high - got))
        per_series.append({"series": key, "accepted": bound.low,
                           "accepted_max": bound.high, "committed": got,
                           "lost": lost.low, "lost_max": lost.high})
    loss = StreamLoss(onset=onset, settled_at=clock.now(),
                      lost=Bound(float(sum(item["lost"] for item in per_series)),
                                 float(sum(item["lost_max"] for item in per_series))),
                      resolution_s=interval, per_series=per_series)
    met = _verdict(loss.lost, slo)
    result = {**loss.to_json(), "slo_messages": slo, "met": met,
              "verdict": _verdict_name(met, slo)}
    measurement.update(result)
    worst = max(per_series, key=lambda item: (item["lost"], item["lost_max"]))
    worst_lost = Bound(worst["lost"], worst["lost_max"])
    scrapes = (f"accepted scraped every {interval:g} s" if interval is not None else
               "accepted's scrape interval unknown")
    detail = (f"{worst['series']} lost {worst_lost.text()}; {scrapes}" if loss.lost.high
              else f"over {len(per_series)} series; {scrapes}")
    _stream_verdict(loss.lost, slo, detail, measurement)
    return result
