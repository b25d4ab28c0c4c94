"""The self-healing logic under test: alerts in, cordons and shard moves out.

:class:`Healer` is driven by its process (:mod:`gameday.lab.controller`) and by tests:
``observe_alerts`` with what Prometheus says, ``tick`` to advance shard starts, moves
and restarts. It never sleeps and takes time from an injectable clock; processes come
from a :class:`ShardLauncher`, routes go out through a ``push`` callback.

Rules:

- a critical alert (``GpuDoubleBitEcc``, ``GpuCriticalXid``, ``GpuFellOffBus``,
  ``GpuThermalThrottle``) on a healthy GPU cordons
  it; every shard served from a cordoned GPU moves (:func:`choose_gpu`): the
  replacement is started, and once it answers ``/healthz`` the routes are pushed and
  only then is the old process stopped;
- a cordoned GPU with no critical alert firing any more is uncordoned (a spare again);
- a shard process that exited is restarted, on the same GPU when healthy; if that
  restart fails too (e.g. the GPU is out of memory), the next try moves it elsewhere;
- ``GpuSingleBitEcc`` (warning) is recorded, nothing more.
"""

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import structlog

from gameday.clock import Clock
from gameday.contract.gpus import gpu_label
from gameday.lab.alerts import Alert
from gameday.lab.launcher import ShardHandle, ShardLauncher
from gameday.lab.placement import GpuKey, GpuSlot, choose_gpu
from gameday.lab.routes import Route

__all__ = ["Healer", "HealerMetrics", "ShardStatus", "StartReason"]

log = structlog.get_logger("gameday.lab.healing")

StartReason = Literal["initial", "moved", "restarted"]
ShardStatus = Literal["serving", "starting", "failed"]
EventType = Literal["alert_firing", "alert_resolved", "gpu_cordoned", "gpu_uncordoned",
                    "shard_moved", "shard_restarted"]

START_TIMEOUT_S = 15.0
STOP_TIMEOUT_S = 3.0
MAX_EVENTS = 500


class HealerMetrics:
    """Where the healer reports its timings (the controller exports them)."""

    def detected(self, seconds: float) -> None: ...

    def responded(self, seconds: float) -> None: ...

    def moved(self) -> None: ...


@dataclass
class _Instance:
    """One shard process on one GPU."""

    handle: ShardHandle
    gpu: GpuKey
    url: str | None = None


@dataclass
class _Start:
    """A shard process starting, to replace (or become) the shard's serving instance."""

    instance: _Instance
    reason: StartReason
    deadline: float  # monotonic
    seen_at: float | None  # when the alert that caused the move was seen (epoch)


@dataclass
class _Shard:
    shard: int
    home: GpuKey
    serving: _Instance | None = None
    starting: _Start | None = None
    failures: int = 0
    retry_at: float = 0.0  # monotonic
    failed_on: GpuKey | None = None  # where the last start failed


@dataclass
class _Retiring:
    handle: ShardHandle
    kill_at: float  # monotonic


@dataclass
class _Firing:
    alert: Alert
    seen_at: float


@dataclass
class Healer:
    gpus: Sequence[GpuSlot]
    homes: Sequence[GpuKey]  # initial GPU of each shard
    launcher: ShardLauncher
    push: Callable[[int, list[Route]], None]  # (version, routes)
    clock: Clock
    metrics: HealerMetrics = field(default_factory=HealerMetrics)
    version: int = 0
    events: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._gpus = {g.key: g for g in self.gpus}
        self._shards = [_Shard(i, home) for i, home in enumerate(self.homes)]
        self._retiring: list[_Retiring] = []
        self._firing: dict[tuple[str, GpuKey], _Firing] = {}
        self._critical_seen: dict[GpuKey, float] = {}

    # -- alerts -------------------------------------------------------------------------

    def observe_alerts(self, alerts: Sequence[Alert]) -> None:
        """Take the alerts active now (a successful poll); cordon and uncordon GPUs."""
        now = self.clock.now()
        current = {(a.name, (a.node, a.gpu)): a for a in alerts
                   if a.state == "firing" and (a.node, a.gpu) in self._gpus}
        for key, alert in current.items():
            if key in self._firing:
                continue
            self._firing[key] = _Firing(alert, now)
            self.metrics.detected(max(0.0, now - alert.active_at))
            self._event("alert_firing", key[1], alert=alert.name,
                        detail=alert.summary or f"{alert.severity} alert, value {alert.value}")
            if alert.critical:
                self._critical_seen.setdefault(key[1], now)
        for key in [k for k in self._firing if k not in current]:
            gone = self._firing.pop(key)
            self._event("alert_resolved", key[1], alert=gone.alert.name)
        critical = {gpu: a for (_, gpu), a in current.items() if a.critical}
        for gpu, alert in sorted(critical.items()):
            slot = self._gpus[gpu]
            if slot.state == "healthy":
                slot.state = "cordoned"
                self._event("gpu_cordoned", gpu, alert=alert.name,
                            detail=f"{alert.name} firing since {alert.active_at:.3f}")
                log.warning("gpu_cordoned", gpu=slot.label, alert=alert.name)
        for slot in self.gpus:
            if slot.state == "cordoned" and slot.key not in critical:
                slot.state = "healthy"
                self._critical_seen.pop(slot.key, None)
                self._event("gpu_uncordoned", slot.key,
                            detail="no critical alert fires for it any more")
                log.info("gpu_uncordoned", gpu=slot.label)

    # -- shards -------------------------------------------------------------------------

    def tick(self) -> None:
        """Advance starts, moves, restarts and stops; never blocks for long."""
        mono = self.clock.monotonic()
        self._reap(mono)
        for shard in self._shards:
            if shard.starting is not None:
                self._advance(shard, mono)
            if shard.starting is None and self._needs_start(shard) and mono >= shard.retry_at:
                self._start(shard, mono)

    def busy(self) -> bool:
        """Whether something is in flight (then tick often)."""
        return bool(self._retiring) or any(s.starting for s in self._shards)

    def _needs_start(self, shard: _Shard) -> bool:
        serving = shard.serving
        return (serving is None or serving.handle.poll() is not None
                or self._gpus[serving.gpu].state == "cordoned")

    def _load(self, exclude: _Shard) -> dict[GpuKey, int]:
        load: dict[GpuKey, int] = {}
        for shard in self._shards:
            if shard is exclude:
                continue
            for inst in (shard.serving, shard.starting.instance if shard.starting else None):
                if inst is not None:
                    load[inst.gpu] = load.get(inst.gpu, 0) + 1
        return load

    def _start(self, shard: _Shard, mono: float) -> None:
        serving = shard.serving
        seen_at: float | None = None
        if serving is None:
            reason: StartReason = "initial"
            target = choose_gpu(self.gpus, self._load(shard), prefer=shard.home,
                                domain=self._gpus[shard.home].nvlink_domain)
        elif self._gpus[serving.gpu].state == "cordoned":
            reason = "moved"
            seen_at = self._critical_seen.get(serving.gpu)
            target = choose_gpu(self.gpus, self._load(shard), avoid=serving.gpu,
                                domain=self._gpus[serving.gpu].nvlink_domain)
        elif shard.failed_on == serving.gpu:
            reason = "moved"  # restarting in place failed: try another GPU
            target = choose_gpu(self.gpus, self._load(shard), avoid=serving.gpu,
                                domain=self._gpus[serving.gpu].nvlink_domain)
        else:
            reason = "restarted"
            target = choose_gpu(self.gpus, self._load(shard), prefer=serving.gpu,
                                domain=self._gpus[serving.gpu].nvlink_domain)
        if target is None:
            shard.retry_at = mono + 1.0
            log.error("no_healthy_gpu", shard=shard.shard, reason=reason)
            return
        handle = self.launcher.launch(shard.shard, target.node, target.gpu)
        shard.starting = _Start(_Instance(handle, target.key), reason,
                                mono + START_TIMEOUT_S, seen_at)
        log.info("shard_starting", shard=shard.shard, gpu=target.label, reason=reason,
                 pid=handle.pid)

    def _advance(self, shard: _Shard, mono: float) -> None:
        start = shard.starting
        assert start is not None
        inst = start.instance
        code = inst.handle.poll()
        problem = None
        if self._gpus[inst.gpu].state == "cordoned":
            problem = "its GPU was cordoned"
        elif code is not None:
            problem = f"it exited with code {code}"
        elif mono > start.deadline:
            problem = f"it was not ready within {START_TIMEOUT_S:g}s"
        else:
            url = inst.handle.ready_url()
            if url is not None:
                inst.url = url
                self._commit(shard, start)
            return
        log.warning("shard_start_failed", shard=shard.shard, gpu=gpu_label(*inst.gpu),
                    problem=problem)
        self._retire(inst.handle, mono)
        shard.starting = None
        shard.failed_on = inst.gpu
        shard.failures += 1
        shard.retry_at = mono + min(5.0, 0.25 * 2 ** shard.failures)

    def _commit(self, shard: _Shard, start: _Start) -> None:
        old = shard.serving
        shard.serving = start.instance
        shard.starting = None
        shard.failures = 0
        shard.failed_on = None
        self.version += 1
        self.push(self.version, self.routes())
        now = self.clock.now()
        to = {"node": start.instance.gpu[0], "gpu": start.instance.gpu[1]}
        if old is not None:
            self._retire(old.handle, self.clock.monotonic())
        if start.reason == "moved" and old is not None:
            self.metrics.moved()
            if start.seen_at is not None:
                self.metrics.responded(max(0.0, now - start.seen_at))
            self._event("shard_moved", old.gpu, shard=shard.shard, to=to)
        elif start.reason == "restarted" and old is not None:
            self._event("shard_restarted", old.gpu, shard=shard.shard, to=to)
        log.info("shard_serving", shard=shard.shard, gpu=gpu_label(*start.instance.gpu),
                 reason=start.reason, url=start.instance.url, version=self.version)

    def _retire(self, handle: ShardHandle, mono: float) -> None:
        if handle.poll() is None:
            handle.terminate()
        self._retiring.append(_Retiring(handle, mono + STOP_TIMEOUT_S))

    def _reap(self, mono: float) -> None:
        keep = []
        for item in self._retiring:
            if item.handle.poll() is not None:
                continue
            if mono >= item.kill_at:
                item.handle.kill()
            keep.append(item)
        self._retiring = keep

    def handles(self) -> list[ShardHandle]:
        """Every shard process this healer started and has not seen exit."""
        found = [r.handle for r in self._retiring]
        for shard in self._shards:
            for inst in (shard.serving, shard.starting.instance if shard.starting else None):
                if inst is not None:
                    found.append(inst.handle)
        return [h for h in found if h.poll() is None]

    # -- views --------------------------------------------------------------------------

    def routes(self) -> list[Route]:
        """Where the router should send each shard's work now."""
        return [Route(s.shard, s.serving.gpu[0], s.serving.gpu[1], s.serving.url)
                for s in self._shards if s.serving is not None and s.serving.url]

    def status(self, shard: _Shard) -> ShardStatus:
        if shard.starting is not None:
            return "starting"
        serving = shard.serving
        if serving is None or serving.handle.poll() is not None:
            return "failed"
        return "failed" if self._gpus[serving.gpu].state == "cordoned" else "serving"

    def placement(self) -> dict[str, Any]:
        """The ``/placement`` document (without ``time`` and ``epoch``)."""
        shards = []
        on_gpu: dict[GpuKey, list[int]] = {}
        for shard in self._shards:
            inst = shard.serving or (shard.starting.instance if shard.starting else None)
            entry: dict[str, Any] = {"shard": shard.shard, "node": None, "gpu": None,
                                     "uuid": None, "url": None, "pid": None,
                                     "status": self.status(shard)}
            if inst is not None:
                slot = self._gpus[inst.gpu]
                entry.update(node=slot.node, gpu=slot.gpu, uuid=slot.uuid, url=inst.url,
                             pid=inst.handle.pid)
            if shard.serving is not None:
                on_gpu.setdefault(shard.serving.gpu, []).append(shard.shard)
            shards.append(entry)
        gpus = [{"node": g.node, "gpu": g.gpu, "uuid": g.uuid,
                 "nvlink_domain": g.nvlink_domain, "state": g.state,
                 "shards": on_gpu.get(g.key, [])} for g in self.gpus]
        return {"version": self.version, "shards": shards, "gpus": gpus,
                "events": list(self.events)}

    def _event(self, kind: EventType, gpu: GpuKey, **extra: Any) -> None:
        event = {"t": self.clock.now(), "type": kind, "node": gpu[0], "gpu": gpu[1], **extra}
        self.events.append(event)
        del self.events[:-MAX_EVENTS]
        log.info("event", **event)

