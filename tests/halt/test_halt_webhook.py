"""The halt webhook's guard, over real HTTPS (TLS 1.3, certificates this test makes) and
real HTTP: mutual TLS admits only a client certificate of its CA, a bearer token only
that token; a firing notification engages (the fleet's engage is a recorder here: what
it reaches is tested with real agents in test_halt_alerts.py), a resolved one does not,
and a body that is no Alertmanager payload is a 400."""

import http.client
import json
import ssl
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509

from gameday.errors import InvalidInput
from gameday.safety.halt_webhook import HaltWebhook, reason_of
from gameday.wire.tls import ServerTLS, client_context
from gameday.wire.tokens import TokenSet
from tests.agent.pki import Pki, loopback_san

TOKEN = "wh" + "0123456789abcdef" * 4
FIRING = {"version": "4", "status": "firing", "receiver": "halt", "alerts": [
    {"status": "firing", "labels": {"alertname": "BudgetGone", "severity": "page"},
     "annotations": {"summary": "error budget gone"}},
    {"status": "firing", "labels": {"alertname": "BudgetGone", "zone": "b"}}]}


def _post(hook: HaltWebhook, body: object, *, context: ssl.SSLContext | None = None,
          token: str | None = None) -> tuple[int, dict[str, Any]]:
    host, port = hook.url.split("://")[1].rsplit(":", 1)
    conn = (http.client.HTTPSConnection(host, int(port), timeout=10, context=context)
            if context is not None else http.client.HTTPConnection(host, int(port), timeout=10))
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    try:
        conn.request("POST", "/halt", json.dumps(body).encode(), headers)
        answer = conn.getresponse()
        return answer.status, json.loads(answer.read())
    finally:
        conn.close()


def test_reason_names_the_alert_and_its_summary() -> None:
    assert reason_of(FIRING) == ("alert BudgetGone and 1 more firing (Alertmanager receiver "
                                 "halt): error budget gone")
    assert reason_of({**FIRING, "status": "resolved"}) is None
    with pytest.raises(InvalidInput):
        reason_of({"status": "firing"})


def test_mutual_tls_admits_only_its_clients(tmp_path: Path) -> None:
    for directory in ("ca", "other"):
        (tmp_path / directory).mkdir()
    pki, other = Pki(tmp_path / "ca"), Pki(tmp_path / "other", "other-ca")
    cert, key = pki.issue("server", "webhook", loopback_san())
    good = pki.issue("client", "alertmanager",
                     [x509.UniformResourceIdentifier("spiffe://gd/alertmanager")])
    stranger = other.issue("client", "stranger", [x509.DNSName("stranger")])
    engaged: list[str] = []

    def engage(reason: str) -> dict[str, Any]:
        engaged.append(reason)
        return {"exit_code": 0, "lines": ["ok"]}

    hook = HaltWebhook("127.0.0.1", 0, engage, tokens=None,
                       tls=ServerTLS(cert, key, pki.ca_pem)).start()
    try:
        status, answer = _post(hook, FIRING, context=client_context(pki.ca_pem, *good))
        assert (status, answer["engaged"]) == (200, True)
        assert engaged == [answer["reason"]]
        for refused in (client_context(pki.ca_pem), client_context(pki.ca_pem, *stranger)):
            with pytest.raises((ssl.SSLError, ConnectionError)):
                _post(hook, FIRING, context=refused)
        assert len(engaged) == 1
    finally:
        hook.stop()


def test_a_bearer_token_guards_plain_http(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(0o600)
    engaged: list[str] = []

    def engage(reason: str) -> dict[str, Any]:
        engaged.append(reason)
        return {"exit_code": 1, "lines": ["agent x: did not answer"]}

    hook = HaltWebhook("127.0.0.1", 0, engage, tokens=TokenSet(path=token_file)).start()
    try:
        assert _post(hook, FIRING)[0] == 401
        assert _post(hook, FIRING, token=TOKEN + "x")[0] == 401
        assert engaged == []
        assert _post(hook, {**FIRING, "status": "resolved"}, token=TOKEN)[1]["engaged"] is False
        assert _post(hook, [1, 2], token=TOKEN)[0] == 400
        assert _post(hook, {"status": "firing"}, token=TOKEN)[0] == 400
        status, answer = _post(hook, FIRING, token=TOKEN)  # an agent did not answer
        assert status == 503 and answer["lines"] == ["agent x: did not answer"]
        assert len(engaged) == 1
    finally:
        hook.stop()
    with pytest.raises(InvalidInput, match="needs --token-file or mutual TLS"):
        HaltWebhook("127.0.0.1", 0, lambda reason: {}, tokens=None)
