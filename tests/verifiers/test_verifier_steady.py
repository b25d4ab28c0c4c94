"""verifiers.steady against real HTTP servers and a real Prometheus (Debian package)."""


import pytest
from chaoslib.exceptions import ActivityFailed

from gameday.engine.session import Session, deactivate
from gameday.stats import percentile
from gameday.targets.base import Target
from tests.verifiers.verifier_helpers import (
    ModelServer,
    PrometheusUnderTest,
    free_port,
    new_session,
    only_result,
)
from verifiers.steady import http_latency_ok, prometheus_query_ok

# -- HTTP latency -------------------------------------------------------------------------


def test_the_latency_percentile_is_nearest_rank() -> None:
    values = [float(v) for v in range(1, 21)]
    assert percentile(values, 0.99, nearest_rank=True) == 20.0
    assert percentile(values, 0.5, nearest_rank=True) == 10.0
    assert percentile([float(v) for v in range(1, 201)], 0.99, nearest_rank=True) == 198.0
    assert percentile([3.0], 0.99, nearest_rank=True) == 3.0
    assert percentile([1, 2, 3, 4], 0.5) == 2.5  # the RTO percentiles interpolate
    with pytest.raises(ValueError, match="no values"):
        percentile([], 0.99)
    with pytest.raises(ValueError, match="quantile must be in"):
        percentile([1.0], 99)


def test_latency_ok_records_the_measurement(session: Session, model: ModelServer) -> None:
    assert http_latency_ok(f"{model.url}/healthz", p99_ms=2000, samples=5) is True
    result = only_result(session)
    assert result.verifier == "steady.http_latency_ok"
    assert result.passed is True
    assert result.measurement["samples"] == 5
    assert result.measurement["method"] == "GET"
    assert 0 < result.measurement["p50_ms"] <= result.measurement["p99_ms"] < 2000
    assert model.requests == [("GET", None)] * 5


def test_predict_url_gets_golden_rows_posted(session: Session, model: ModelServer) -> None:
    assert http_latency_ok(f"{model.url}/predict", p99_ms=2000, samples=3, predict_rows=4)
    assert model.requests == [("POST", 4)] * 3
    assert http_latency_ok(f"{model.url}/predict", p99_ms=2000, samples=1,
                           json_body={"inputs": [[0.0] * 16] * 2})
    assert model.requests[-1] == ("POST", 2)


def test_slow_endpoint_misses_the_bound(session: Session, model: ModelServer) -> None:
    model.delay_s = 0.03
    with pytest.raises(ActivityFailed) as caught:
        http_latency_ok(f"{model.url}/predict", p99_ms=5, samples=3)
    message = str(caught.value)
    assert message.startswith("p99 latency ")
    assert "ms > 5 ms (missed by " in message and "3 samples) for POST " in message
    result = only_result(session)
    assert result.passed is False and result.reason == message
    assert result.measurement["p99_ms"] >= 30


def test_error_answer_fails_with_the_servers_error(session: Session,
                                                  model: ModelServer) -> None:
    model.broken = True
    with pytest.raises(ActivityFailed) as caught:
        http_latency_ok(f"{model.url}/predict", samples=20)
    assert str(caught.value) == (f"POST {model.url}/predict answered 503: shard 0 broken "
                                 f"(sample 1 of 20)")
    assert only_result(session).measurement["status"] == 503


def test_unreachable_endpoint_fails_in_one_line(session: Session) -> None:
    url = f"http://127.0.0.1:{free_port()}/healthz"
    with pytest.raises(ActivityFailed) as caught:
        http_latency_ok(url, samples=2, timeout_s=1)
    assert str(caught.value).startswith(f"GET {url} failed: ")
    assert "refused" in str(caught.value) and "\n" not in str(caught.value)


def test_bad_arguments_fail_as_activity_failures(session: Session) -> None:
    with pytest.raises(ActivityFailed, match="must be an http"):
        http_latency_ok("ftp://x/y")
    with pytest.raises(ActivityFailed, match="samples must be >= 1"):
        http_latency_ok("http://127.0.0.1:1/", samples=0)
    assert [r.passed for r in session.results] == [False, False]


# -- Prometheus --------------------------------------------------------------------------


# the ``prometheus`` fixture (one real Prometheus for the package) is in conftest.py


def test_every_series_within_bounds_passes(session: Session,
                                           prometheus: PrometheusUnderTest) -> None:
    assert prometheus_query_ok("test_queue_depth", prometheus_url=prometheus.url,
                               min_value=1, max_value=10) is True
    result = only_result(session)
    assert result.verifier == "steady.prometheus_query_ok" and result.passed is True
    assert result.measurement["series"] == 2 and result.measurement["out_of_bounds"] == 0
    assert sorted(v["value"] for v in result.measurement["values"]) == [3.0, 7.0]


def test_one_series_out_of_bounds_fails_naming_it(session: Session,
                                                   prometheus: PrometheusUnderTest) -> None:
    with pytest.raises(ActivityFailed) as caught:
        prometheus_query_ok("test_queue_depth", prometheus_url=prometheus.url, max_value=5)
    assert str(caught.value) == (
        "prometheus query 'test_queue_depth': 1 of 2 series out of bounds (<= 5): "
        f'test_queue_depth{{instance="127.0.0.1:{prometheus.exporter_port}",job="exporter",'
        'queue="b"} = 7 (above max 5 by 2)')
    assert only_result(session).passed is False


def test_scalar_equals_and_target_default(prometheus: PrometheusUnderTest) -> None:
    session = new_session(target=Target(kind="lab", prometheus_url=prometheus.url))
    try:
        assert prometheus_query_ok("scalar(sum(test_queue_depth))", equals=10)
        with pytest.raises(ActivityFailed, match=r"scalar = 10 \(not equal to 11\)"):
            prometheus_query_ok("scalar(sum(test_queue_depth))", equals=11)
        with pytest.raises(ActivityFailed, match=r"= 3 \(below min 4 by 1\)"):
            prometheus_query_ok('test_queue_depth{queue="a"}', min_value=4)
        assert [r.passed for r in session.results] == [True, False, False]
    finally:
        deactivate()


def test_empty_result_fails_unless_allowed(session: Session,
                                           prometheus: PrometheusUnderTest) -> None:
    with pytest.raises(ActivityFailed) as caught:
        prometheus_query_ok("test_queue_depth > 100", prometheus_url=prometheus.url)
    assert str(caught.value) == ("prometheus query 'test_queue_depth > 100' returned no "
                                 "series (expected present)")
    assert prometheus_query_ok("test_queue_depth > 100", prometheus_url=prometheus.url,
                               allow_empty=True)
    assert [r.passed for r in session.results] == [False, True]


def test_bad_queries_fail_in_one_line(session: Session, prometheus: PrometheusUnderTest) -> None:
    with pytest.raises(ActivityFailed) as caught:
        prometheus_query_ok("sum(", prometheus_url=prometheus.url)
    assert "prometheus query 'sum(' failed at" in str(caught.value)
    assert "parse error" in str(caught.value) and "\n" not in str(caught.value)
    with pytest.raises(ActivityFailed, match="range vector"):
        prometheus_query_ok("test_queue_depth[5s]", prometheus_url=prometheus.url)


def test_missing_or_unreachable_prometheus(session: Session) -> None:
    with pytest.raises(ActivityFailed, match="needs prometheus_url"):
        prometheus_query_ok("up")
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(ActivityFailed) as caught:
        prometheus_query_ok("up", prometheus_url=url, timeout_s=1)
    assert str(caught.value) == f"prometheus query 'up': cannot reach Prometheus at {url}: " \
                                "ConnectionError"
    with pytest.raises(ActivityFailed, match="min_value 2 > max_value 1"):
        prometheus_query_ok("up", prometheus_url=url, min_value=2, max_value=1)
