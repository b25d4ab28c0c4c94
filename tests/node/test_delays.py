"""The hold each packet (or lab request) gets under ``net.latency``, as a property: for
any delay, jitter, distribution and correlation, and any arrival times (bursts, gaps,
ties), no item leaves before it arrived or before the item before it, a uniform hold
stays within delay ± jitter, a draw is never negative, and the holds centre on the
delay. The kernel side (real packets through the queue) is tests/node/test_net_latency.py."""

import random
import statistics

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gameday.kinds.net import NET_LATENCY
from gameday.node.delays import DelaySampler

delays = st.floats(0.0, 1.0)
shares = st.floats(0.0, 1.0)
gaps = st.lists(st.one_of(st.just(0.0), st.floats(0.0, 2.0)), min_size=1, max_size=200)


@settings(max_examples=300, deadline=None)
@given(delay=delays, jitter_share=shares, correlation=shares, seed=st.integers(0, 2**32),
       distribution=st.sampled_from(["uniform", "normal"]), gaps=gaps)
def test_no_item_leaves_early_or_out_of_order(delay: float, jitter_share: float,
                                              correlation: float, seed: int,
                                              distribution: str, gaps: list[float]) -> None:
    jitter = delay * jitter_share
    sampler = DelaySampler(delay, jitter, distribution, correlation, rng=random.Random(seed))
    arrival, last = 0.0, float("-inf")
    for gap in gaps:
        arrival += gap
        release = sampler.release_at(arrival)
        assert release >= arrival and release >= last
        if distribution == "uniform":  # its own hold, or the one before's (order)
            assert release <= max(arrival + delay + jitter, last) + 1e-12
            assert release >= arrival + delay - jitter - 1e-12
        last = release


@settings(max_examples=100, deadline=None)
@given(delay=st.floats(0.001, 1.0), jitter_share=shares, seed=st.integers(0, 2**32),
       distribution=st.sampled_from(["uniform", "normal"]))
def test_the_holds_centre_on_the_delay(delay: float, jitter_share: float, seed: int,
                                       distribution: str) -> None:
    """With the jitter small enough that no draw is clipped at zero (normal: 4 sd), the
    mean hold is the delay (to within 5 standard errors)."""
    jitter = delay * jitter_share / 4
    sampler = DelaySampler(delay, jitter, distribution, rng=random.Random(seed))
    draws = [sampler.draw() for _ in range(2000)]
    sd = jitter / 3 ** 0.5 if distribution == "uniform" else jitter
    assert abs(statistics.fmean(draws) - delay) <= 5 * sd / 2000 ** 0.5 + 1e-12
    assert min(draws) >= 0


def test_full_correlation_is_a_constant_offset_and_bad_values_are_refused() -> None:
    sampler = DelaySampler(0.01, 0.005, "normal", 1.0, rng=random.Random(1))
    assert {sampler.draw() for _ in range(50)} == {0.01}
    with pytest.raises(ValueError, match="distribution"):
        DelaySampler(0.01, 0.0, "pareto")
    with pytest.raises(ValueError, match="correlation"):
        DelaySampler(0.01, 0.0, "uniform", 1.5)


def test_a_faults_parameters_make_its_sampler() -> None:
    sampler = DelaySampler.of(NET_LATENCY.parse({"delay_ms": 20, "jitter_ms": 5,
                                                 "distribution": "normal",
                                                 "correlation": 25}))
    assert (sampler.delay_s, sampler.jitter_s, sampler.distribution,
            sampler.correlation) == (0.02, 0.005, "normal", 0.25)
