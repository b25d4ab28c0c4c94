"""Alertmanager silences for a planned game day (API v2), so on-call is not paged by it.

:class:`AlertmanagerClient` creates, extends and expires silences (``POST
/api/v2/silences``, ``DELETE /api/v2/silence/{id}``; requests, with tenacity retrying
what did not reach the server). :class:`SilenceHold` holds one for a run: created
before the method, recorded in the ledger, its end kept one lease ahead while the run
lives (so a dead run's silence ends by itself within a lease), expired when the run
ends. ``gameday cleanup`` expires the silences of dead runs (the ledger's
``silence-created`` events without a ``silence-expired``).

A silence only mutes notifications: Prometheus still evaluates and fires the alerts,
and whatever reads them (the lab's controller, a real remediation loop) still acts. What a
silence mutes is the experiment's to say (:mod:`gameday.experiment.silence`).
"""

import datetime
import threading
from collections.abc import Callable
from typing import Any

import requests
import structlog
import tenacity

from gameday.clock import SYSTEM_CLOCK, Clock
from gameday.errors import ObservabilityError
from gameday.experiment.silence import SilenceSpec

__all__ = ["AlertmanagerClient", "SilenceHold"]

_log = structlog.get_logger("gameday.alertmanager")


def _iso(epoch: float) -> str:
    return datetime.datetime.fromtimestamp(epoch, datetime.UTC).isoformat().replace(
        "+00:00", "Z")


#: Retried: the request never reached Alertmanager (refused, reset, timed out).
_RETRY = tenacity.retry(
    retry=tenacity.retry_if_exception_type((requests.ConnectionError, requests.Timeout)),
    stop=tenacity.stop_after_attempt(3), wait=tenacity.wait_exponential(0.2, max=2),
    reraise=True)


class AlertmanagerClient:
    """Alertmanager's API v2 at ``url`` (``http://host:9093``)."""

    def __init__(self, url: str, *, timeout_s: float = 5.0,
                 session: requests.Session | None = None) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self._http = session or requests.Session()

    def close(self) -> None:
        self._http.close()

    @_RETRY
    def _request(self, method: str, path: str, body: object = None) -> requests.Response:
        return self._http.request(method, self.url + path, json=body, timeout=self.timeout_s)

    def _call(self, method: str, path: str, body: object = None) -> requests.Response:
        try:
            return self._request(method, path, body)
        except requests.RequestException as exc:
            raise ObservabilityError(f"alertmanager {self.url}: {method} {path}: "
                                     f"{type(exc).__name__}: {exc}") from None

    def put(self, spec: SilenceSpec, starts_at: float, ends_at: float,
            silence_id: str | None = None) -> str:
        """Create a silence (or, with ``silence_id``, move the end of that one); its id."""
        body: dict[str, Any] = {
            "matchers": [m.to_json() for m in spec.matchers], "startsAt": _iso(starts_at),
            "endsAt": _iso(ends_at), "createdBy": spec.created_by, "comment": spec.comment}
        if silence_id:
            body["id"] = silence_id
        answer = self._call("POST", "/api/v2/silences", body)
        if answer.status_code != 200:
            raise ObservabilityError(f"alertmanager {self.url}: silence refused "
                                     f"({answer.status_code}): {answer.text.strip()[:200]}")
        found = answer.json().get("silenceID")
        if not isinstance(found, str) or not found:
            raise ObservabilityError(f"alertmanager {self.url}: no silenceID in its answer")
        return found

    def expire(self, silence_id: str) -> bool:
        """Expire a silence; False if it was already expired or is unknown (idempotent)."""
        answer = self._call("DELETE", f"/api/v2/silence/{silence_id}")
        if answer.status_code == 200:
            return True
        if answer.status_code == 404 or "already expired" in answer.text:
            return False
        raise ObservabilityError(f"alertmanager {self.url}: expiring silence {silence_id} "
                                 f"failed ({answer.status_code}): {answer.text.strip()[:200]}")

    def alerts(self) -> list[dict[str, Any]]:
        """The alerts firing now that no silence or inhibition mutes (``GET
        /api/v2/alerts?active=true&silenced=false&inhibited=false``), each with its
        ``labels``."""
        answer = self._call("GET", "/api/v2/alerts?active=true&silenced=false&inhibited=false")
        if answer.status_code != 200:
            raise ObservabilityError(f"alertmanager {self.url}: GET /api/v2/alerts answered "
                                     f"{answer.status_code}: {answer.text.strip()[:200]}")
        try:
            found = answer.json()
        except ValueError:
            raise ObservabilityError(f"alertmanager {self.url}: GET /api/v2/alerts answered "
                                     "no JSON") from None
        if not isinstance(found, list):
            raise ObservabilityError(f"alertmanager {self.url}: GET /api/v2/alerts answered "
                                     "no list")
        return [alert for alert in found if isinstance(alert, dict)]

    def get(self, silence_id: str) -> dict[str, Any]:
        """The silence as Alertmanager has it (``status.state``: active, expired, ...)."""
        answer = self._call("GET", f"/api/v2/silence/{silence_id}")
        if answer.status_code != 200:
            raise ObservabilityError(f"alertmanager {self.url}: no silence {silence_id} "
                                     f"({answer.status_code})")
        found: dict[str, Any] = answer.json()
        return found


class SilenceHold:
    """One run's silence: :meth:`start` creates it (ending a lease from now) and keeps
    its end a lease ahead every third of a lease; :meth:`end` expires it (idempotent).
    ``on_created`` / ``on_expired`` record it (the ledger)."""

    def __init__(self, spec: SilenceSpec, lease_s: float, *, clock: Clock = SYSTEM_CLOCK,
                 on_created: Callable[[str, str, float], None] | None = None,
                 on_expired: Callable[[str, float, str], None] | None = None,
                 client: AlertmanagerClient | None = None) -> None:
        self.spec = spec
        self.lease_s = lease_s
        self.silence_id: str | None = None
        self.started_at = 0.0
        self.ended = False
        self._clock = clock
        self._client = client or AlertmanagerClient(spec.alertmanager)
        self._on_created = on_created
        self._on_expired = on_expired
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def start(self) -> str:
        self.started_at = self._clock.now()
        ends_at = self.started_at + self.lease_s
        self.silence_id = self._client.put(self.spec, self.started_at, ends_at)
        if self._on_created is not None:
            self._on_created(self.spec.alertmanager, self.silence_id, ends_at)
        _log.info("silence.created", silence_id=self.silence_id, url=self.spec.alertmanager,
                  ends_at=ends_at)
        self._thread = threading.Thread(target=self._extend, name="gameday-silence",
                                        daemon=True)
        self._thread.start()
        return self.silence_id

    def _extend(self) -> None:
        while not self._stop.wait(self.lease_s / 3):
            with self._lock:
                if self.ended or self.silence_id is None:
                    return
                try:
                    self.silence_id = self._client.put(
                        self.spec, self.started_at, self._clock.now() + self.lease_s,
                        self.silence_id)
                except ObservabilityError as exc:
                    _log.warning("silence.extend_failed", silence_id=self.silence_id,
                                 error=str(exc))

    def end(self, reason: str) -> None:
        """Expire the silence now; a failure is logged (the silence still ends within a
        lease, and ``gameday cleanup`` finds it in the ledger)."""
        self._stop.set()
        with self._lock:
            if self.ended or self.silence_id is None:
                return
            self.ended = True
            try:
                self._client.expire(self.silence_id)
            except ObservabilityError as exc:
                _log.warning("silence.expire_failed", silence_id=self.silence_id,
                             error=str(exc))
                return
            finally:
                self._client.close()
            if self._on_expired is not None:
                self._on_expired(self.silence_id, self._clock.now(), reason)
        _log.info("silence.expired", silence_id=self.silence_id, reason=reason)
