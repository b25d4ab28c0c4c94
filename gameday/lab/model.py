"""The lab's model: a small deterministic numpy MLP, split tensor-parallel across shards.

``y = relu(x @ W1 + b1) @ W2 + b2``. Shard ``i`` holds a block of hidden units (columns of
``W1`` and ``b1``, the same rows of ``W2``) and computes the partial
``relu(x @ W1_i + b1_i) @ W2_i``; the router adds the partials **in shard order** and then
``b2``. Every shard computes with one BLAS thread on float64, so an answer is
bit-identical wherever a shard runs.

The weight store (``DIR/store``) holds ``manifest.json``, ``head.npz`` (``b2``) and
``shard-{i}.npz``; it is written once per lab and read with ordinary file reads.
"""

import io
import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from gameday.lab.files import write_atomic

__all__ = [
    "ModelSpec",
    "ShardWeights",
    "build_model",
    "combine",
    "load_bias",
    "load_shard",
    "load_spec",
    "write_store",
]

Array = npt.NDArray[np.float64]


@dataclass(frozen=True)
class ModelSpec:
    shards: int
    d_in: int = 16
    hidden: int = 96
    d_out: int = 8
    seed: int = 20240917

    def __post_init__(self) -> None:
        if not 1 <= self.shards <= self.hidden:
            raise ValueError(f"shards must be between 1 and {self.hidden}, got {self.shards}")


@dataclass(frozen=True)
class ShardWeights:
    """One shard's slice of the model."""

    shard: int
    w1: Array  # (d_in, h_i)
    b1: Array  # (h_i,)
    w2: Array  # (h_i, d_out)

    def partial(self, x: Array) -> Array:
        """``relu(x @ W1_i + b1_i) @ W2_i`` for a batch ``x`` of shape ``(n, d_in)``."""
        hidden = np.maximum(x @ self.w1 + self.b1, 0.0)
        result: Array = hidden @ self.w2
        return result

    def corrupted(self) -> "ShardWeights":
        """A deterministic silent corruption: every 7th ``W1`` entry has its sign flipped
        (what a flipped bit in device memory does to an answer, minus the randomness)."""
        w1 = self.w1.copy()
        flat = w1.reshape(-1)
        flat[::7] *= -1.0
        return ShardWeights(self.shard, w1, self.b1.copy(), self.w2.copy())


def build_model(spec: ModelSpec) -> tuple[list[ShardWeights], Array]:
    """The full model from ``spec.seed``, split into ``spec.shards`` shards; and ``b2``."""
    rng = np.random.default_rng(spec.seed)
    w1 = rng.standard_normal((spec.d_in, spec.hidden)) / np.sqrt(spec.d_in)
    b1 = rng.standard_normal(spec.hidden) * 0.1
    w2 = rng.standard_normal((spec.hidden, spec.d_out)) / np.sqrt(spec.hidden)
    b2 = rng.standard_normal(spec.d_out) * 0.1
    blocks = np.array_split(np.arange(spec.hidden), spec.shards)
    shards = [ShardWeights(i, np.ascontiguousarray(w1[:, idx]), b1[idx].copy(),
                           np.ascontiguousarray(w2[idx, :]))
              for i, idx in enumerate(blocks)]
    return shards, b2


def combine(partials: list[Array], b2: Array) -> Array:
    """Sum ``partials`` in shard order, then add ``b2`` (the router's reduction)."""
    total = partials[0].copy()
    for part in partials[1:]:
        total += part
    total += b2
    return total


def _npz_bytes(**arrays: Array) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)  # type: ignore[arg-type]
    return buf.getvalue()


def _load_npz(path: Path) -> dict[str, Array]:
    with np.load(io.BytesIO(path.read_bytes()), allow_pickle=False) as data:
        return {name: np.asarray(data[name], dtype=np.float64) for name in data.files}


def write_store(store: Path, spec: ModelSpec) -> None:
    """Write the model for ``spec`` into ``store`` (each file atomically)."""
    shards, b2 = build_model(spec)
    for weights in shards:
        write_atomic(store / f"shard-{weights.shard}.npz",
                     _npz_bytes(w1=weights.w1, b1=weights.b1, w2=weights.w2))
    write_atomic(store / "head.npz", _npz_bytes(b2=b2))
    write_atomic(store / "manifest.json", json.dumps(asdict(spec), indent=1) + "\n")


def load_spec(store: Path) -> ModelSpec:
    return ModelSpec(**json.loads((store / "manifest.json").read_text(encoding="utf-8")))


def load_shard(store: Path, shard: int) -> ShardWeights:
    """Read shard ``shard``'s weights from the store (``OSError`` if unreadable)."""
    arrays = _load_npz(store / f"shard-{shard}.npz")
    return ShardWeights(shard, arrays["w1"], arrays["b1"], arrays["w2"])


def load_bias(store: Path) -> Array:
    """Read the output bias ``b2``."""
    return _load_npz(store / "head.npz")["b2"]
