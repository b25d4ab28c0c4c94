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
"""

from dataclasses import dataclass

from gameday.errors import InvalidInput

SECONDS_PER_DAY = 86_400.0

LLAMA3_INTERRUPTIONS = 419
LLAMA3_DAYS = 54
LLAMA3_GPUS = 16_384
LLAMA3_RATE_PER_GPU_DAY = LLAMA3_INTERRUPTIONS / LLAMA3_DAYS / LLAMA3_GPUS
LLAMA3_SOURCE = ('"The Llama 3 Herd of Models", Meta, 2024, Table 5: 419 unexpected '
                 'interruptions in 54 days on 16,384 GPUs')


@dataclass(frozen=True)
class Fleet:
    """The fleet a projection is for: its size and its interruption rate."""

    gpus: int = LLAMA3_GPUS
    interruptions_per_gpu_day: float = LLAMA3_RATE_PER_GPU_DAY
    source: str = LLAMA3_SOURCE

    def __post_init__(self) -> None:
        if self.gpus < 1:
            raise InvalidInput(f"fleet size must be >= 1 GPU, got {self.gpus}")
        if self.interruptions_per_gpu_day < 0:
            raise InvalidInput("the interruption rate must be >= 0, got "
                               f"{self.interruptions_per_gpu_day}")

    @property
    def interruptions_per_day(self) -> float:
        """``Λ``: interruptions the whole job sees per day."""
        return self.interruptions_per_gpu_day * self.gpus


@dataclass(frozen=True)
class CostProjection:
    """One projection: the inputs and what they mean for the fleet."""

    fleet: Fleet
    rto_s: float
    rpo_s: float
    ettr: float
    lost_s_per_day: float
    gpu_hours_lost_per_day: float

    def line(self) -> str:
        """One sentence for reports and gate summaries."""
        parts = [f"a {self.rto_s:g} s RTO"] if self.rto_s or not self.rpo_s else []
        if self.rpo_s:
            parts.append(f"{self.rpo_s:g} s of work redone")
        return (f"{' + '.join(parts)} at {self.fleet.gpus:,} GPUs "
                f"({self.fleet.interruptions_per_day:.2f} interruptions/day): "
                f"ETTR {self.ettr:.5f}, {self.gpu_hours_lost_per_day:,.0f} GPU-hours lost "
                f"per day")

    def to_json(self) -> dict[str, float | int | str]:
        return {"gpus": self.fleet.gpus,
                "interruptions_per_gpu_day": self.fleet.interruptions_per_gpu_day,
                "interruptions_per_day": round(self.fleet.interruptions_per_day, 4),
                "rate_source": self.fleet.source, "rto_s": self.rto_s, "rpo_s": self.rpo_s,
                "ettr": round(self.ettr, 6), "lost_s_per_day": round(self.lost_s_per_day, 2),
                "gpu_hours_lost_per_day": round(self.gpu_hours_lost_per_day, 2)}


def project(rto_s: float, rpo_s: float = 0.0, fleet: Fleet | None = None) -> CostProjection:
    """Project a measured RTO (and RPO, in seconds of training redone) onto a fleet."""
    if rto_s < 0 or rpo_s < 0:
        raise InvalidInput(f"RTO and RPO must be >= 0 s, got {rto_s} and {rpo_s}")
    fleet = fleet or Fleet()
    per_interruption = rto_s + rpo_s
    lost = fleet.interruptions_per_day * per_interruption
    ettr = 1.0 / (1.0 + lost / SECONDS_PER_DAY)
    return CostProjection(fleet=fleet, rto_s=rto_s, rpo_s=rpo_s, ettr=ettr,
                          lost_s_per_day=lost,
                          gpu_hours_lost_per_day=fleet.gpus * 24.0 * (1.0 - ettr))

