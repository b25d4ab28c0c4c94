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

from dataclasses import asdict, dataclass, field
from typing import Any

from gameday.engine.session import current
from gameday.errors import GamedayError
from gameday.promql import PromQL, PromQLError, Series, series_key
from verifiers._promql import prometheus_url_of
from verifiers._results import fail, record

__all__ = ["checkpoint_loss", "stream_loss"]

#: The lab trainer's expressions (see docs/lab.md, "The trainer").
LAB_PROGRESS = "max(gameday_trainer_step)"
LAB_DURABLE = "max(gameday_trainer_checkpoint_step)"
LAB_RESUMED = "max(gameday_trainer_resumed_from_step)"


@dataclass(frozen=True)
class CheckpointLoss:
    """Work a crash cost a checkpointing job."""

    onset: float
    progress_at_fault: float
    progress_seen_at: float  # when Prometheus last saw progress before the restart
    durable_at_fault: float | None
    restarted_at: float  # first sample of the restarted job
    resumed_from: float
    lost_steps: float
    steps_per_s: float | None
    lost_s: float | None
    resumed_behind_durable: float  # durable steps the job failed to resume from

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _before(samples: tuple[tuple[float, float], ...], t: float) -> list[tuple[float, float]]:
    return [sample for sample in samples if sample[0] < t]


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


def assess_checkpoint_loss(progress: Series, durable: Series | None, resumed: Series | None,
                           onset: float, gap_s: float) -> CheckpointLoss | None:
    """Fold the three series into the loss; None until the job has restarted."""
    index = find_restart(progress, onset, gap_s)
    if index is None:
        return None
    restarted_at, first_value = progress.samples[index]
    before = progress.samples[:index]
    seen_at, at_fault = before[-1]
    resumed_from = first_value
    if resumed is not None:
        after = [value for t, value in resumed.samples if t >= restarted_at]
        if after:
            resumed_from = after[0]
    durable_at_fault = None
    if durable is not None:
        earlier = _before(durable.samples, restarted_at)
        durable_at_fault = earlier[-1][1] if earlier else None
    lost = max(0.0, at_fault - resumed_from)
    first = len(before) - 1  # the start of the job's last uninterrupted run
    while first > 0 and before[first - 1][1] <= before[first][1] and \
            before[first][0] - before[first - 1][0] <= gap_s:
        first -= 1
    moving = before[first:]
    pace = None
    if len(moving) >= 2 and moving[-1][0] > moving[0][0] and moving[-1][1] > moving[0][1]:
        pace = (moving[-1][1] - moving[0][1]) / (moving[-1][0] - moving[0][0])
    behind = 0.0
    if durable_at_fault is not None and resumed_from < durable_at_fault:
        behind = durable_at_fault - resumed_from
    return CheckpointLoss(
        onset=onset, progress_at_fault=at_fault, progress_seen_at=seen_at,
        durable_at_fault=durable_at_fault, restarted_at=restarted_at,
        resumed_from=resumed_from, lost_steps=lost,
        steps_per_s=None if pace is None else round(pace, 4),
        lost_s=None if pace is None else round(lost / pace, 3),
        resumed_behind_durable=behind)


def _one_series(client: PromQL, query: str, start: float, end: float, step_s: float,
                name: str) -> Series | None:
    found = client.range(query, start, end, step_s)
    if len(found) > 1:
        raise PromQLError(f"{name} {query!r} returned {len(found)} series "
                          f"({found[0].key}, {found[1].key}, ...); aggregate it to one, "
                          f"e.g. max({query})")
    return found[0] if found else None


def _onset(kind: str | None) -> float | None:
    session = current()
    if kind is None:
        return session.fault_onset()
    times = [entry.applied_at for entry in session.ledger.entries() if entry.kind == kind]
    return max(times, default=None)


def _number(value: float) -> str:
    return f"{value:g}" if float(value).is_integer() else f"{value:.1f}"


def checkpoint_loss(progress: str = LAB_PROGRESS, durable: str | None = LAB_DURABLE,
                    resumed: str | None = LAB_RESUMED, prometheus_url: str | None = None,
                    slo_steps: float | None = None, slo_s: float | None = None,
                    fault_kind: str | None = None, lookback_s: float = 120.0,
                    timeout_s: float = 60.0, interval_s: float = 0.5,
                    resolution_s: float = 0.25, gap_s: float = 1.5) -> dict[str, Any]:
    """Measure the work a crash lost: progress at the fault minus progress resumed from.

    ``progress`` is a PromQL expression for the job's progress (one series; a counter
    of steps, samples or tokens), ``durable`` the progress of its last durable
    checkpoint, ``resumed`` the progress the restarted job resumed from (without it, the
    first progress value after the restart). The defaults read the lab's trainer.
    ``prometheus_url`` defaults to the run target's Prometheus.

    The fault is the run's most recent one (or the most recent of kind ``fault_kind``,
    e.g. ``process.kill``). Prometheus is read every ``interval_s`` (range queries at
    ``resolution_s`` from ``lookback_s`` before the fault) until the job has restarted
    after the fault — progress went down, or the series was gone for more than
    ``gap_s`` seconds — or ``timeout_s`` passes. Progress at the fault is the last value
    Prometheus saw before the restart (so up to one scrape interval of progress may be
    unseen); seconds lost are the steps lost at the pace before the fault.

    The objective is ``slo_steps`` (default: the experiment's ``slo.rpo_steps``) and
    optionally ``slo_s``. Returns ``{"onset", "progress_at_fault", "progress_seen_at",
    "durable_at_fault", "restarted_at", "resumed_from", "lost_steps", "steps_per_s",
    "lost_s", "resumed_behind_durable", "slo_steps", "slo_s", "met"}``; raises
    ``ActivityFailed`` with one line, e.g. ``rpo 63 steps > slo 50 steps (missed by 13
    steps; 15.8 s of training lost)``.
    """
    verifier = "rpo.checkpoint_loss"
    session = current()
    slo = slo_steps if slo_steps is not None else session.extension.slo.rpo_steps
    measurement: dict[str, Any] = {"progress": progress, "durable": durable,
                                   "resumed": resumed, "slo_steps": slo, "slo_s": slo_s}
    try:
        if min(timeout_s, interval_s, resolution_s, gap_s) <= 0 or lookback_s <= 0:
            raise GamedayError("need timeout_s, interval_s, resolution_s, gap_s and "
                               "lookback_s > 0")
        client = PromQL(prometheus_url_of(prometheus_url))
    except GamedayError as exc:
        fail(verifier, f"checkpoint_loss: {exc}", measurement)
    measurement["prometheus_url"] = client.url
    onset = _onset(fault_kind)
    if onset is None:
        fail(verifier, "checkpoint_loss needs a fault onset: no fault"
                       + (f" of kind {fault_kind}" if fault_kind else "")
                       + " was applied in this session", measurement)
    clock = session.clock
    deadline = clock.monotonic() + timeout_s
    loss: CheckpointLoss | None = None
    last: Series | None = None
    while True:
        end = clock.now()
        start = onset - lookback_s
        try:
            last = _one_series(client, progress, start, end, resolution_s, "progress")
            if last is not None:
                durable_series = (_one_series(client, durable, start, end, resolution_s,
                                              "durable") if durable else None)
                resumed_series = (_one_series(client, resumed, start, end, resolution_s,
                                              "resumed") if resumed else None)
                loss = assess_checkpoint_loss(last, durable_series, resumed_series, onset,
                                              gap_s)
        except GamedayError as exc:
            fail(verifier, f"checkpoint_loss: {exc}", measurement)
        if loss is not None or clock.monotonic() >= deadline:
            break
        clock.sleep(min(interval_s, max(0.0, deadline - clock.monotonic())))
    measurement["onset"] = onset
    if loss is None:
        seen = ("no progress series at all" if last is None or not last.samples else
                f"progress last {_number(last.samples[-1][1])}, no restart seen")
        fail(verifier, f"job did not restart within timeout {timeout_s:g} s after the fault "
                       f"({seen})", measurement)
    met = None
    if slo is not None or slo_s is not None:
        met = (slo is None or loss.lost_steps <= slo) and (
            slo_s is None or loss.lost_s is None or loss.lost_s <= slo_s)
    result = {**loss.to_json(), "slo_steps": slo, "slo_s": slo_s, "met": met}
    measurement.update(result)
    seconds = f"{loss.lost_s:.1f} s of training" if loss.lost_s is not None else "pace unknown"
    warning = (f"; warning: resumed {_number(loss.resumed_behind_durable)} steps behind the "
               f"last durable checkpoint" if loss.resumed_behind_durable else "")
    if slo is not None and loss.lost_steps > slo:
        fail(verifier, f"rpo {_number(loss.lost_steps)} steps > slo {slo:g} steps (missed by "
                       f"{_number(loss.lost_steps - slo)} steps; {seconds} lost){warning}",
             measurement)
    if slo_s is not None and loss.lost_s is not None and loss.lost_s > slo_s:
        fail(verifier, f"rpo {loss.lost_s:.1f} s > slo {slo_s:g} s (missed by "
                       f"{loss.lost_s - slo_s:.1f} s; {_number(loss.lost_steps)} steps lost)"
                       f"{warning}", measurement)
    bound = f" <= slo {slo:g} steps" if slo is not None else " (no slo)"
    record(verifier, met, measurement,
           f"rpo {_number(loss.lost_steps)} steps{bound} ({seconds} lost; resumed from "
           f"{_number(loss.resumed_from)}, progress was {_number(loss.progress_at_fault)})"
           f"{warning}")
    return result


@dataclass(frozen=True)
class StreamLoss:
    """Offsets a fault lost: accepted at the fault minus committed after it, per series."""

    onset: float
    settled_at: float
    lost: float
    per_series: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _join_key(labels: dict[str, str], on: list[str] | None) -> str:
    kept = {key: value for key, value in labels.items()
            if key != "__name__" and (on is None or key in on)}
    return series_key(kept)


def stream_loss(accepted: str, committed: str, prometheus_url: str | None = None,
                slo_messages: float | None = None, on: list[str] | None = None,
                fault_kind: str | None = None, settle_s: float = 5.0,
                timeout_s: float = 60.0, interval_s: float = 0.5) -> dict[str, Any]:
    """Measure the messages a fault lost: offsets accepted at the fault minus committed.

    ``accepted`` is a PromQL expression for the offsets acknowledged to producers (e.g.
    a topic's log-end offset per partition), ``committed`` for the offsets made durable
    or processed (e.g. a consumer group's committed offset per partition). Series are
    joined on their labels (``on``: only these labels; default all but the name).

    ``accepted`` is read at the fault onset (the run's most recent fault, or the most
    recent of kind ``fault_kind``); ``committed`` is then read every ``interval_s`` until
    every series reaches its accepted offset or stops moving for ``settle_s`` seconds
    (or ``timeout_s`` passes). Lost = the sum over series of ``accepted - committed``
    where positive. The objective is ``slo_messages`` (default: the experiment's
    ``slo.rpo_steps``).

    Returns ``{"onset", "settled_at", "lost", "per_series": [{"series", "accepted",
    "committed", "lost"}], "slo_messages", "met"}``; raises ``ActivityFailed`` with one
    line, e.g. ``stream lost 120 messages > slo 0 (missed by 120; partition="3" lost
    120)``.
    """
    verifier = "rpo.stream_loss"
    session = current()
    slo = slo_messages if slo_messages is not None else session.extension.slo.rpo_steps
    measurement: dict[str, Any] = {"accepted": accepted, "committed": committed,
                                   "slo_messages": slo}
    try:
        if min(timeout_s, interval_s) <= 0 or settle_s < 0:
            raise GamedayError("need timeout_s, interval_s > 0 and settle_s >= 0")
        client = PromQL(prometheus_url_of(prometheus_url))
    except GamedayError as exc:
        fail(verifier, f"stream_loss: {exc}", measurement)
    measurement["prometheus_url"] = client.url
    onset = _onset(fault_kind)
    if onset is None:
        fail(verifier, "stream_loss needs a fault onset: no fault was applied in this "
                       "session", measurement)
    clock = session.clock
    try:
        at_fault = {_join_key(dict(labels), on): value
                    for labels, value in client.instant(accepted, at=onset)}
    except GamedayError as exc:
        fail(verifier, f"stream_loss: {exc}", measurement)
    if not at_fault:
        fail(verifier, f"stream_loss: accepted {accepted!r} had no series at the fault",
             measurement)
    deadline = clock.monotonic() + timeout_s
    previous: dict[str, float] | None = None
    still_since = clock.monotonic()
    while True:
        try:
            now_committed = {_join_key(dict(labels), on): value
                             for labels, value in client.instant(committed)}
        except GamedayError as exc:
            fail(verifier, f"stream_loss: {exc}", measurement)
        caught_up = all(now_committed.get(key, float("-inf")) >= value
                        for key, value in at_fault.items())
        if now_committed != previous:
            previous, still_since = now_committed, clock.monotonic()
        settled = previous is not None and clock.monotonic() - still_since >= settle_s
        if caught_up or settled or clock.monotonic() >= deadline:
            break
        clock.sleep(interval_s)
    per_series: list[dict[str, Any]] = []
    for key, value in sorted(at_fault.items()):
        got = now_committed.get(key)
        lost = value if got is None else max(0.0, value - got)
        per_series.append({"series": key, "accepted": value, "committed": got, "lost": lost})
    loss = StreamLoss(onset=onset, settled_at=clock.now(),
                      lost=float(sum(item["lost"] for item in per_series)),
                      per_series=per_series)
    met = None if slo is None else loss.lost <= slo
    result = {**loss.to_json(), "slo_messages": slo, "met": met}
    measurement.update(result)
    worst = max(per_series, key=lambda item: item["lost"])
    detail = f"{worst['series']} lost {_number(worst['lost'])}"
    if slo is not None and loss.lost > slo:
        fail(verifier, f"stream lost {_number(loss.lost)} messages > slo {slo:g} (missed by "
                       f"{_number(loss.lost - slo)}; {detail})", measurement)
    bound = f" <= slo {slo:g}" if slo is not None else " (no slo)"
    record(verifier, met, measurement,
           f"stream lost {_number(loss.lost)} messages{bound} over {len(per_series)} series")
    return result
