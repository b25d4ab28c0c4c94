"""Self-healing re-shard: after a GPU fault, every shard serves from a healthy GPU.

``verify_reshard`` polls a placement source (shard -> GPU, GPU states, the controller's
event log) until the placement is healed or a timeout passes, and measures the time to
detect (first alert or cordon for a faulted GPU) and the time to re-shard (the move of
the last shard off a faulted GPU) from the event log.
"""

from dataclasses import dataclass, field
from typing import Any

from gameday.activity import current, fail, record
from gameday.clock import Clock
from gameday.errors import GamedayError
from verifiers.detection import detection_signal
from verifiers.placement import (
    Placement,
    PlacementError,
    PlacementEvent,
    PlacementSource,
    gpu_label,
)
from verifiers.sources import placement_source

__all__ = ["REFERENCE_DETECT_S", "REFERENCE_RESPONSE_S", "verify_reshard"]

NVLINK_RULES = ("preferred", "required", "ignore")
DETECTION_EVENTS = ("alert_firing", "gpu_cordoned")
#: Reference figures of a production DCGM health pipeline: 8 s from the fault to its
#: detection, 3.2 s from detection to the workload running elsewhere. ``reference:
#: true`` uses them as the detect and response objectives.
REFERENCE_DETECT_S = 8.0
REFERENCE_RESPONSE_S = 3.2

Key = tuple[str, int]


@dataclass
class Assessment:
    """What is wrong (``problems``) and what is merely noted (``warnings``) in a snapshot."""

    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    moves: list[dict[str, Any]] = field(default_factory=list)
    detection: PlacementEvent | None = None
    resharded_at: float | None = None
    resharded_by: str = "event"


@dataclass
class ReshardCheck:
    """The rules a healed placement must meet; ``assess`` applies them to one snapshot."""

    faulted: list[Key]
    onset: float
    nvlink_rule: str = "preferred"
    max_shards_per_gpu: int = 1
    require_detection: bool = False
    expected_shards: set[int] = field(default_factory=set)
    origins: dict[int, Key] = field(default_factory=dict)  # shard -> faulted GPU it was on
    remembered: bool = False

    def remember(self, snapshot: Placement) -> None:
        """Note the shards (and which sat on a faulted GPU) from the first snapshot."""
        if self.remembered:
            return
        self.remembered = True
        self.expected_shards |= {shard.shard for shard in snapshot.shards}
        for shard in snapshot.shards:
            if shard.where is not None and shard.where in self.faulted:
                self.origins.setdefault(shard.shard, shard.where)

    def _moves_off_faulted(self, snapshot: Placement) -> dict[int, PlacementEvent]:
        moved: dict[int, PlacementEvent] = {}
        for event in snapshot.events:
            if (event.type == "shard_moved" and event.t >= self.onset
                    and event.gpu is not None and (event.node, event.gpu) in self.faulted
                    and event.shard is not None):
                moved.setdefault(event.shard, event)
                self.origins.setdefault(event.shard, (event.node, event.gpu))
        return moved

    def assess(self, snapshot: Placement) -> Assessment:
        found = Assessment()
        faulted = set(self.faulted)
        present = {shard.shard for shard in snapshot.shards}
        if not snapshot.shards:
            found.problems.append("the placement lists no shards")
        for missing in sorted(self.expected_shards - present):
            found.problems.append(f"shard {missing} is missing from the placement")
        for shard in sorted(snapshot.shards, key=lambda s: s.shard):
            if shard.where is None:
                continue
            gpu = snapshot.gpu(*shard.where)
            if shard.where in faulted:
                found.problems.append(f"shard {shard.shard} still on faulted GPU {shard.label}")
            elif gpu is not None and gpu.state != "healthy":
                found.problems.append(f"shard {shard.shard} on {gpu.state} GPU {shard.label}")
        for shard in sorted(snapshot.shards, key=lambda s: s.shard):
            if shard.status != "serving" or shard.where is None:
                found.problems.append(f"shard {shard.shard} is {shard.status} on {shard.label}")
        per_gpu: dict[Key, list[int]] = {}
        for shard in snapshot.shards:
            if shard.where is not None:
                per_gpu.setdefault(shard.where, []).append(shard.shard)
        for where, numbers in sorted(per_gpu.items()):
            if len(numbers) > self.max_shards_per_gpu:
                found.problems.append(
                    f"{gpu_label(*where)} holds {len(numbers)} shards "
                    f"({', '.join(map(str, sorted(numbers)))}; max {self.max_shards_per_gpu})")
        moved = self._moves_off_faulted(snapshot)
        for number, origin in sorted(self.origins.items()):
            self._check_move(snapshot, number, origin, moved.get(number), per_gpu, found)
        if moved:
            found.resharded_at = max(event.t for event in moved.values())
        found.detection = next(
            (event for event in snapshot.events
             if event.type in DETECTION_EVENTS and event.t >= self.onset
             and event.gpu is not None and (event.node, event.gpu) in faulted), None)
        if found.detection is None:
            text = (f"no alert or cordon event for faulted "
                    f"{', '.join(gpu_label(*key) for key in self.faulted)}")
            (found.problems if self.require_detection else found.warnings).append(text)
        return found

    def _check_move(self, snapshot: Placement, number: int, origin: Key,
                    event: PlacementEvent | None, per_gpu: dict[Key, list[int]],
                    found: Assessment) -> None:
        shard = snapshot.shard(number)
        destination = shard.where if shard is not None else (event.to if event else None)
        if destination is None or destination == origin:
            return
        origin_gpu, destination_gpu = snapshot.gpu(*origin), snapshot.gpu(*destination)
        origin_domain = origin_gpu.nvlink_domain if origin_gpu else origin[0]
        destination_domain = destination_gpu.nvlink_domain if destination_gpu else ""
        same = origin_domain == destination_domain
        found.moves.append({
            "shard": number, "from": gpu_label(*origin), "to": gpu_label(*destination),
            "at": event.t if event else None, "from_domain": origin_domain,
            "to_domain": destination_domain, "same_nvlink_domain": same})
        if same or self.nvlink_rule == "ignore":
            return
        faulted = set(self.faulted)
        free = [gpu for gpu in snapshot.gpus
                if gpu.nvlink_domain == origin_domain and gpu.state == "healthy"
                and gpu.key not in faulted and gpu.key != destination
                and len([n for n in per_gpu.get(gpu.key, []) if n != number])
                < self.max_shards_per_gpu]
        if not free:
            return
        text = (f"shard {number} moved to {gpu_label(*destination)} (nvlink domain "
                f"{destination_domain or '?'}) although {free[0].label} in domain "
                f"{origin_domain} of faulted {gpu_label(*origin)} was free")
        (found.problems if self.nvlink_rule == "required" else found.warnings).append(text)


def poll_reshard(source: PlacementSource, check: ReshardCheck, clock: Clock, *,
                 timeout_s: float, interval_s: float) -> tuple[Assessment, Placement | None, int]:
    """Read the placement every ``interval_s`` until it passes ``check`` or time runs out."""
    deadline = clock.monotonic() + timeout_s
    polls = 0
    snapshot: Placement | None = None
    while True:
        polls += 1
        try:
            snapshot = source.read()
        except PlacementError as exc:
            found = Assessment(problems=[f"cannot read placement: {exc}"])
        else:
            check.remember(snapshot)
            found = check.assess(snapshot)
        if not found.problems:
            if found.resharded_at is None and snapshot is not None and any(
                    (s := snapshot.shard(n)) is not None and s.where not in (None, origin)
                    for n, origin in check.origins.items()):
                found.resharded_at = clock.now()  # no event log: when this poll saw it
                found.resharded_by = "poll"
            return found, snapshot, polls
        now = clock.monotonic()
        if now >= deadline:
            return found, snapshot, polls
        clock.sleep(min(interval_s, deadline - now))


def verify_reshard(placement: str | dict[str, Any] = "lab",
                   same_nvlink_domain: str = "preferred", max_shards_per_gpu: int = 1,
                   timeout_s: float = 30.0, interval_s: float = 0.2,
                   detect_slo_s: float | None = None, reshard_slo_s: float | None = None,
                   respond_slo_s: float | None = None, reference: bool = False,
                   detect: dict[str, Any] | None = None) -> dict[str, Any]:
    """Verify that the shards moved off the faulted GPUs and the placement is healthy.

    ``placement`` is where the placement is read: ``lab`` (or ``target``) for the run
    target's ``placement_url``, an http(s) URL serving the same JSON document, or
    ``{"kubernetes": {...}}``: shard pods joined with dcgm-exporter's ``pod`` /
    ``namespace`` / ``gpu`` / ``UUID`` / ``Hostname`` (or ``hostname``) labels in
    Prometheus (see ``verifiers.k8s_placement``). The faulted GPUs are those of the
    faults applied in this run.

    The placement is read every ``interval_s`` seconds, for at most ``timeout_s``, until:
    no shard is on a faulted or cordoned GPU; every shard that was listed is listed and
    ``serving``; no GPU holds more than ``max_shards_per_gpu`` shards; and, for
    ``same_nvlink_domain`` ``required``, a shard moved off a faulted GPU landed in that
    GPU's NVLink domain whenever a healthy GPU with room was there (``preferred`` only
    records a warning, ``ignore`` skips the rule).

    From the controller's event log: the time to detect is from the fault onset to the
    first ``alert_firing`` or ``gpu_cordoned`` event for a faulted GPU, the time to
    re-shard to the last ``shard_moved`` off a faulted GPU. A placement without an event
    log (Kubernetes) gives the time to re-shard from the first poll that saw it healed
    (to within ``interval_s``) and the time to detect from ``detect`` (``{"promql":
    EXPR}`` such as ``ALERTS{alertstate="firing"}``, see ``verifiers.detection``).
    ``detect_slo_s`` and ``reshard_slo_s`` bound them (with ``detect_slo_s`` a detection
    is required); ``respond_slo_s`` bounds the time from detection to re-shard.
    ``reference: true`` sets the detect and respond objectives, where not given, to a
    production DCGM pipeline's figures: 8 s and 3.2 s.

    Returns ``{"placement", "faulted_gpus", "onset", "detected_at", "time_to_detect_s",
    "detect_event", "resharded_at", "time_to_reshard_s", "moves", "shards", "serving",
    "warnings", "polls", "verified_at", "placement_version"}``. Raises ``ActivityFailed``
    with one line, e.g. ``shard 0 still on faulted GPU node-0/gpu0 after 30 s``.
    """
    verifier = "reshard.verify_reshard"
    session = current()
    if reference:
        detect_slo_s = REFERENCE_DETECT_S if detect_slo_s is None else detect_slo_s
        respond_slo_s = REFERENCE_RESPONSE_S if respond_slo_s is None else respond_slo_s
    measurement: dict[str, Any] = {"placement": placement, "rule": same_nvlink_domain}
    try:
        if same_nvlink_domain not in NVLINK_RULES:
            raise GamedayError(f"same_nvlink_domain must be one of {', '.join(NVLINK_RULES)}, "
                               f"got {same_nvlink_domain!r}")
        if max_shards_per_gpu < 1 or timeout_s <= 0 or interval_s <= 0:
            raise GamedayError(f"need max_shards_per_gpu >= 1, timeout_s > 0 and "
                               f"interval_s > 0, got {max_shards_per_gpu}, {timeout_s}, "
                               f"{interval_s}")
        source = placement_source(placement)
        signal = detection_signal(detect, session) if detect is not None else None
    except GamedayError as exc:
        fail(verifier, f"verify_reshard: {exc}", measurement)
    measurement["placement"] = source.describe()
    faulted = sorted({(gpu.node, gpu.index) for gpu in session.faulted_gpus()})
    onset = session.fault_onset()
    measurement["faulted_gpus"] = [gpu_label(*key) for key in faulted]
    if not faulted or onset is None:
        fail(verifier, "verify_reshard needs a GPU fault: no fault with a GPU target was "
                       "applied in this session", measurement)
    check = ReshardCheck(faulted=faulted, onset=onset, nvlink_rule=same_nvlink_domain,
                         max_shards_per_gpu=max_shards_per_gpu,
                         require_detection=detect_slo_s is not None and signal is None)
    deadline = session.clock.monotonic() + timeout_s
    found, snapshot, polls = poll_reshard(source, check, session.clock, timeout_s=timeout_s,
                                          interval_s=interval_s)
    detection = found.detection
    detected_at = detection.t if detection else None
    detect_event: dict[str, Any] | None = None if detection is None else {
        "type": detection.type, "alert": detection.alert,
        "gpu": gpu_label(detection.node, detection.gpu or 0)}
    if detection is None and signal is not None:
        # the signal can lag the re-shard (a Prometheus that has not scraped the error
        # yet): read it until it shows the detection or the time is up
        seen = signal.first_after(onset)
        while seen is None and session.clock.monotonic() < deadline:
            session.clock.sleep(min(interval_s, max(0.0, deadline - session.clock.monotonic())))
            seen = signal.first_after(onset)
        if seen is not None:
            detected_at, detect_event = seen.t, {"type": "signal", "signal": seen.what}
            found.warnings = [w for w in found.warnings if not w.startswith("no alert")]
    if detected_at is None and signal is not None and detect_slo_s is not None:
        found.problems.append(f"no detection by {signal.describe()}"
                              + (f" ({signal.error})" if signal.error else ""))
    detect_s = None if detected_at is None else round(detected_at - onset, 3)
    reshard_s = None if found.resharded_at is None else round(found.resharded_at - onset, 3)
    respond_s = (None if detected_at is None or found.resharded_at is None
                 else round(found.resharded_at - detected_at, 3))
    measurement.update({
        "onset": onset, "detected_at": detected_at,
        "time_to_detect_s": detect_s, "detect_event": detect_event,
        "time_to_respond_s": respond_s, "respond_slo_s": respond_slo_s,
        "resharded_by": found.resharded_by if found.resharded_at is not None else None,
        "resharded_at": found.resharded_at, "time_to_reshard_s": reshard_s,
        "moves": found.moves, "warnings": found.warnings, "polls": polls,
        "shards": len(snapshot.shards) if snapshot else 0,
        "serving": sum(s.status == "serving" for s in snapshot.shards) if snapshot else 0,
        "verified_at": session.clock.now() if not found.problems else None,
        "placement_version": snapshot.version if snapshot else None,
        "detect_slo_s": detect_slo_s, "reshard_slo_s": reshard_slo_s})
    if found.problems:
        more = len(found.problems) - 1
        fail(verifier, f"{found.problems[0]} after {timeout_s:g} s"
                       + (f" (and {more} more problem{'s' * (more > 1)})" if more else ""),
             measurement)
    if detect_slo_s is not None and detect_s is not None and detect_s > detect_slo_s:
        fail(verifier, f"time to detect {detect_s:.1f} s > slo {detect_slo_s:g} s (missed by "
                       f"{detect_s - detect_slo_s:.1f} s)", measurement)
    if reshard_slo_s is not None and reshard_s is not None and reshard_s > reshard_slo_s:
        fail(verifier, f"time to re-shard {reshard_s:.1f} s > slo {reshard_slo_s:g} s (missed "
                       f"by {reshard_s - reshard_slo_s:.1f} s)", measurement)
    if respond_slo_s is not None and respond_s is not None and respond_s > respond_slo_s:
        fail(verifier, f"time from detection to re-shard {respond_s:.1f} s > slo "
                       f"{respond_slo_s:g} s (missed by {respond_s - respond_slo_s:.1f} s)",
             measurement)
    if found.moves:
        summary = ", ".join(f"shard {m['shard']} {m['from']} -> {m['to']}" for m in found.moves)
        reason = f"re-sharded: {summary}"
        if reshard_s is not None:
            reason += f" in {reshard_s:.1f} s"
    else:
        reason = "no shard was on a faulted GPU; placement healthy"
    if detect_s is not None:
        reason += f"; detected in {detect_s:.1f} s"
    if found.warnings:
        reason += f"; warning: {found.warnings[0]}"
    record(verifier, True, measurement, reason)
    return measurement
