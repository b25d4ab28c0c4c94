"""The PromQL client of the verifiers and the safeguards, on ``prometheus-api-client``:
instant and range queries with typed results and one-line errors naming the query and
the server."""

import ast
import datetime
import json
import math
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import requests
from prometheus_api_client import PrometheusConnect
from prometheus_api_client.exceptions import PrometheusApiClientException
from urllib3.util.retry import Retry

from gameday.errors import GamedayError, one_line
from gameday.httpclient import retry_reads, session

__all__ = ["PromQL", "PromQLError", "Series", "series_key"]

#: No retries inside the library's adapter: reads are retried by :data:`retry_reads`.
_NO_RETRIES = Retry(total=0, read=False)


class PromQLError(GamedayError):
    """A query failed: Prometheus unreachable, the query rejected, or a surprising answer."""


Labels = Mapping[str, str]


def series_key(labels: Labels) -> str:
    """``name{a="1",b="2"}`` for a label set (labels sorted; ``{}`` when none)."""
    name = labels.get("__name__", "")
    inner = ",".join(f'{key}="{value}"' for key, value in sorted(labels.items())
                     if key != "__name__")
    return f"{name}{{{inner}}}"


@dataclass(frozen=True)
class Series:
    """One series of a query result: its labels and ``(t, value)`` samples in time order."""

    labels: Labels
    samples: tuple[tuple[float, float], ...]

    @property
    def key(self) -> str:
        return series_key(self.labels)


class PromQL:
    """Queries one Prometheus server over its HTTP API, through
    :class:`~prometheus_api_client.PrometheusConnect` on the calling thread's
    :func:`~gameday.httpclient.session`; a query whose connection fails is tried again
    (:data:`~gameday.httpclient.retry_reads`)."""

    def __init__(self, url: str, timeout_s: float = 5.0) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self._connects = threading.local()

    def _connect(self) -> PrometheusConnect:
        """This thread's connection object (made once per thread, on its Session)."""
        connect: PrometheusConnect | None = getattr(self._connects, "connect", None)
        if connect is None:
            connect = PrometheusConnect(url=self.url, retry=_NO_RETRIES, session=session(),
                                        timeout=self.timeout_s)
            self._connects.connect = connect
        return connect

    def _ask(self, query: str, ask: Any) -> Any:
        """``ask(connect)``'s result, with every failure one :class:`PromQLError` line."""
        label = f"query {one_line(query, 120)!r}"
        try:
            return retry_reads(ask)(self._connect())
        except PrometheusApiClientException as exc:
            raise PromQLError(f"{label} failed at {self.url}: "
                              f"{_prometheus_error(str(exc))}") from None
        except requests.JSONDecodeError:
            raise PromQLError(f"{label} at {self.url}: the answer is not JSON") from None
        except requests.RequestException as exc:
            raise PromQLError(f"{label}: cannot reach Prometheus at {self.url}: "
                              f"{type(exc).__name__}") from None
        except (KeyError, TypeError) as exc:
            raise PromQLError(f"{label} at {self.url}: not a Prometheus answer "
                              f"({type(exc).__name__}: {exc})") from None

    def instant_result(self, query: str, at: float | None = None) -> Any:
        """The ``result`` of the instant ``query`` (now, or at Unix time ``at``) as
        Prometheus gave it: a list of series, or ``[t, "v"]`` for a scalar."""
        params = {} if at is None else {"time": f"{at:.3f}"}
        return self._ask(query, lambda connect: connect.custom_query(query, params=params))

    def instant(self, query: str, at: float | None = None) -> list[tuple[Labels, float]]:
        """The instant vector (or scalar) of ``query`` now, or at Unix time ``at``."""
        result = self.instant_result(query, at)
        if isinstance(result, list) and len(result) == 2 and not isinstance(result[0], dict):
            return [({}, float(result[1]))]
        if not isinstance(result, list) or any(
                not isinstance(item, dict) or "value" not in item for item in result):
            raise PromQLError(f"query {one_line(query, 120)!r} did not return an instant "
                              f"vector or scalar")
        return [(dict(item.get("metric") or {}), float(item["value"][1])) for item in result]

    def range(self, query: str, start: float, end: float, step_s: float) -> list[Series]:
        """``query`` evaluated every ``step_s`` from ``start`` to ``end`` (Unix seconds)."""
        step = max(step_s, (end - start) / 10_000, 0.001)
        # start and end as params too: the library rounds its datetimes to whole seconds
        params = {"start": f"{start:.3f}", "end": f"{end:.3f}"}
        result = self._ask(query, lambda connect: connect.custom_query_range(
            query, _utc(start), _utc(end), f"{step:.3f}", params=params))
        if not isinstance(result, list) or any(
                not isinstance(item, dict) or "values" not in item for item in result):
            raise PromQLError(f"query {one_line(query, 120)!r}: unexpected range result")
        found = []
        for item in result:
            samples = tuple((float(t), float(v)) for t, v in item.get("values") or []
                            if not math.isnan(float(v)))
            found.append(Series(dict(item.get("metric") or {}), samples))
        return found


def _utc(seconds: float) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(seconds, datetime.UTC)


def _prometheus_error(text: str) -> str:
    """Prometheus's own error text out of the client's ``HTTP Status Code N (b'...')``."""
    status, _, rest = text.partition(" (")
    try:
        body = ast.literal_eval(rest[:-1]) if rest.endswith(")") else None
        error = json.loads(body)["error"] if isinstance(body, bytes) else None
    except (ValueError, SyntaxError, KeyError, TypeError):
        error = None
    if isinstance(error, str):
        return one_line(f"{status.replace('HTTP Status Code', 'HTTP')}: {error}", 240)
    return one_line(text, 240)
