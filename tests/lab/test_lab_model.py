"""The lab's model: the tensor-parallel split is exact and the store round-trips."""

from pathlib import Path

import numpy as np

from gameday.lab.model import (
    ModelSpec,
    build_model,
    combine,
    load_bias,
    load_shard,
    load_spec,
    write_store,
)


def _inputs() -> np.ndarray:
    return np.random.default_rng(7).standard_normal((5, 16))


def test_shards_add_up_to_the_whole_model() -> None:
    spec = ModelSpec(shards=6)
    shards, b2 = build_model(spec)
    whole_w1 = np.concatenate([s.w1 for s in shards], axis=1)
    whole_b1 = np.concatenate([s.b1 for s in shards])
    whole_w2 = np.concatenate([s.w2 for s in shards], axis=0)
    x = _inputs()
    expected = np.maximum(x @ whole_w1 + whole_b1, 0) @ whole_w2 + b2
    got = combine([s.partial(x) for s in shards], b2)
    assert got.shape == (5, 8)
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)


def test_the_model_is_deterministic_and_the_store_is_exact(tmp_path: Path) -> None:
    spec = ModelSpec(shards=4)
    write_store(tmp_path, spec)
    assert load_spec(tmp_path) == spec
    shards, b2 = build_model(spec)
    x = _inputs()
    stored = combine([load_shard(tmp_path, i).partial(x) for i in range(4)], load_bias(tmp_path))
    assert stored.tobytes() == combine([s.partial(x) for s in shards], b2).tobytes()


def test_corruption_changes_answers_deterministically() -> None:
    shard = build_model(ModelSpec(shards=6))[0][0]
    x = _inputs()
    bad = shard.corrupted()
    assert not np.array_equal(bad.partial(x), shard.partial(x))
    assert bad.partial(x).tobytes() == shard.corrupted().partial(x).tobytes()
