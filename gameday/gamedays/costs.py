"""What a measured RTO costs at scale: effective training time and GPU-hours lost.

A synchronous training job on ``G`` GPUs stops whenever any one of them is interrupted.
With ``λ`` interruptions per GPU per day, the job sees ``Λ = λ·G`` interruptions per
day of productive time. Each one costs ``L = RTO + RPO`` seconds that are not training:
the time to detect and recover (the measured RTO) plus the work redone from the last
durable checkpoint (the RPO, in seconds of training). By the renewal-reward theorem,
over a wall-clock day

    ETTR = productive / wall = 1 / (1 + Λ·L / 86400)

and the fleet loses ``G · 24 · (1 - ETTR)`` GPU-hours per day. The default rate is the
one Meta measured while pre-training Llama 3 405B: 419 unexpected interruptions in 54
days on 16,384 GPUs, i.e. ``λ ≈ 4.74e-4`` per GPU-day (7.76 a day for the whole fleet).

Worked example: a measured 30 s RTO with no work lost, at 16,384 GPUs:
``Λ·L = 7.76 x 30 = 233 s/day``, ``ETTR = 0.99731``, 1,057 GPU-hours lost per day.

A projection is shown only for a fleet someone said the run stands for (a playbook's
``costs.fleet_gpus``, ``gameday report --fleet-gpus``), and only for a training fleet:
the model (one interruption stops the whole job) and the default statistics are those of
synchronous pre-training. A serving fleet loses one replica's capacity when a GPU fails,
not the fleet's, so none is projected for it; :func:`no_projection` says why, in words.
"""

from dataclasses import dataclass
from typing import Any, Final, Literal

from gameday.errors import InvalidInput

__all__ = ["LLAMA3_RATE_PER_GPU_DAY", "LLAMA3_SOURCE", "WORKLOADS", "CostProjection", "Fleet",
           "Workload", "no_projection", "project"]

SECONDS_PER_DAY = 86_400.0

LLAMA3_INTERRUPTIONS = 419
LLAMA3_DAYS = 54
LLAMA3_GPUS = 16_384
LLAMA3_RATE_PER_GPU_DAY = LLAMA3_INTERRUPTIONS / LLAMA3_DAYS / LLAMA3_GPUS
LLAMA3_SOURCE = ('"The Llama 3 Herd of Models", Meta, 2024, Table 5: 419 unexpected '
                 'interruptions in 54 days on 16,384 GPUs')

Workload = Literal["training", "serving"]
WORKLOADS: Final[tuple[Workload, ...]] = ("training", "serving")


@dataclass(frozen=True)
class Fleet:
    """The fleet a projection is for: its size, its interruption rate and where the rate
    comes from, what it runs, and whether anyone said the run stands for it (``stated``:
    the defaults alone project nothing)."""

    gpus: int = LLAMA3_GPUS
    interruptions_per_gpu_day: float = LLAMA3_RATE_PER_GPU_DAY
    source: str = LLAMA3_SOURCE
    workload: Workload = "training"
    stated: bool = False

    def __post_init__(self) -> None:
        if self.workload not in WORKLOADS:
            raise InvalidInput(f"the workload must be training or serving, got "
                               f"{self.workload!r}")
        if self.gpus < 1:
            raise InvalidInput(f"fleet size must be >= 1 GPU, got {self.gpus}")
        if self.interruptions_per_gpu_day < 0:
            raise InvalidInput("the interruption rate must be >= 0, got "
                               f"{self.interruptions_per_gpu_day}")

    @property
    def interruptions_per_day(self) -> float:
        """``Λ``: interruptions the whole job sees per day."""
        return self.interruptions_per_gpu_day * self.gpus

    def to_json(self) -> dict[str, Any]:
        return {"gpus": self.gpus, "interruptions_per_gpu_day": self.interruptions_per_gpu_day,
                "source": self.source, "workload": self.workload, "stated": self.stated}

    @classmethod
    def from_json(cls, data: object) -> "Fleet | None":
        """The fleet a record kept (:meth:`to_json`), or None where it kept none or one
        this version cannot read."""
        if not isinstance(data, dict):
            return None
        try:
            return cls(gpus=int(data["gpus"]),
                       interruptions_per_gpu_day=float(data["interruptions_per_gpu_day"]),
                       source=str(data["source"]),
                       workload="serving" if data.get("workload") == "serving" else "training",
                       stated=bool(data.get("stated")))
        except (KeyError, TypeError, ValueError, InvalidInput):
            return None

    def assumptions(self) -> str:
        """What a projection onto this fleet assumes, in one sentence."""
        return (f"Assumes a synchronous training job on {self.gpus:,} GPUs that stops "
                f"whenever one of them is interrupted, at "
                f"{self.interruptions_per_gpu_day:.3g} interruptions per GPU-day "
                f"(rate: {self.source})")


def no_projection(fleet: Fleet) -> str | None:
    """Why nothing is projected onto ``fleet`` (None: a projection applies)."""
    if not fleet.stated:
        return ("No projection: this run does not say what fleet it stands for (give "
                "--fleet-gpus N, or a playbook's costs.fleet_gpus, to project it onto one)")
    if fleet.workload != "training":
        return ("No projection: the fleet is a serving fleet, and the model (one interrupted "
                "GPU stops the whole job) and the interruption statistics are those of "
                "synchronous training; a serving fleet loses one replica's capacity instead")
    return None


@dataclass(frozen=True)
class CostProjection:
    """One projection: the inputs and what they mean for the fleet."""

    fleet: Fleet
    rto_s: float
    rpo_s: float
    ettr: float
    lost_s_per_day: float
    gpu_hours_lost_per_day: float
    slowdown_s: float = 0.0

    @property
    def slowdown_counted(self) -> bool:
        """Whether the work a slowdown cost is what each interruption is charged."""
        return self.slowdown_s > self.rto_s + self.rpo_s

    def line(self) -> str:
        """One sentence for reports and gate summaries."""
        if self.slowdown_counted:
            parts = [f"a slowdown that cost {self.slowdown_s:.3g} s of work"]
        else:
            parts = [f"a {self.rto_s:g} s RTO"] if self.rto_s or not self.rpo_s else []
            if self.rpo_s:
                parts.append(f"{self.rpo_s:g} s of work redone")
        return (f"{' + '.join(parts)} on a {self.fleet.gpus:,}-GPU training job "
                f"({self.fleet.interruptions_per_day:.2f} interruptions/day): "
                f"ETTR {self.ettr:.5f}, {self.gpu_hours_lost_per_day:,.0f} GPU-hours lost "
                f"per day")

    def to_json(self) -> dict[str, float | int | str]:
        return {"gpus": self.fleet.gpus,
                "interruptions_per_gpu_day": self.fleet.interruptions_per_gpu_day,
                "interruptions_per_day": round(self.fleet.interruptions_per_day, 4),
                "rate_source": self.fleet.source, "workload": self.fleet.workload,
                "rto_s": self.rto_s, "rpo_s": self.rpo_s, "slowdown_s": self.slowdown_s,
                "ettr": round(self.ettr, 6), "lost_s_per_day": round(self.lost_s_per_day, 2),
                "gpu_hours_lost_per_day": round(self.gpu_hours_lost_per_day, 2)}


def project(rto_s: float, rpo_s: float = 0.0, fleet: Fleet | None = None, *,
            slowdown_s: float = 0.0) -> CostProjection:
    """Project a measured RTO (and RPO, in seconds of training redone) onto a fleet.

    ``slowdown_s`` is the work a slowdown cost (``throughput.degradation``'s ``lost_s``:
    what the baseline rate would have done in the window, less what was done). It
    already holds any outage and redone work inside its window, so each interruption
    is charged the larger of it and RTO + RPO, never their sum."""
    if rto_s < 0 or rpo_s < 0 or slowdown_s < 0:
        raise InvalidInput(f"RTO, RPO and slowdown must be >= 0 s, got {rto_s}, {rpo_s} "
                           f"and {slowdown_s}")
    fleet = fleet or Fleet()
    per_interruption = max(rto_s + rpo_s, slowdown_s)
    lost = fleet.interruptions_per_day * per_interruption
    ettr = 1.0 / (1.0 + lost / SECONDS_PER_DAY)
    return CostProjection(fleet=fleet, rto_s=rto_s, rpo_s=rpo_s, ettr=ettr,
                          lost_s_per_day=lost,
                          gpu_hours_lost_per_day=fleet.gpus * 24.0 * (1.0 - ettr),
                          slowdown_s=slowdown_s)

