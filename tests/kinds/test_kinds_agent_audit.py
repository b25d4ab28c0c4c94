"""The case that found the gap: ``"zz": {...}`` on ``net.loss`` and ``storage.stall``,
500 levels deep (and, under the agent's 32-level body limit, 3 deep), sent to a real
agent over HTTP (a single inject, a batch, a check).

Each is a ``400``: the 500-deep body for its nesting, as a whole request; the shallow one
naming ``params.zz``. Nothing is held, the backend is never asked, and the refusal is a
line of the agent's audit trail. The backend records what it is asked
and applies nothing (:class:`tests.kinds.test_kinds_refusal.RecordingBackend`).
"""

import json
import pathlib
from typing import Any

import pytest
import requests

from gameday.agent.audit import AuditTrail
from gameday.agent.server import AgentServer
from tests.kinds.test_kinds_refusal import RecordingBackend

TOKEN = "0c5b9a7e3d1f46a8b2c0e4f6a8b0c2d4e6f8a0b2c4d6e8f0a2b4c6d8e0f2a4b6"
DEPTH = 500


def _deep(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth):
        value = {"zz": value}
    return value


def _item(kind: str, target: dict[str, Any], params: dict[str, Any],
          depth: int) -> dict[str, Any]:
    return {"kind": kind, "target": target, "params": {**params, "zz": _deep(depth)},
            "lease_s": 30}


@pytest.mark.parametrize("depth", [DEPTH, 3])
@pytest.mark.parametrize(("kind", "target", "params"), [
    ("net.loss", {"link": "eth0"}, {"percent": 10}),
    ("storage.stall", {"path": "/tmp"}, {}),
])
def test_an_unknown_deep_key_is_refused_audited_and_applies_nothing(
        tmp_path: pathlib.Path, kind: str, target: dict[str, Any],
        params: dict[str, Any], depth: int) -> None:
    backend = RecordingBackend()
    audit = tmp_path / "audit.jsonl"
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    with AgentServer(backend, token=TOKEN, node="node-0", state_path=tmp_path / "state.json",
                     audit=AuditTrail(audit)) as server:
        item = _item(kind, target, params, depth)
        why = ("nested deeper than 32 levels" if depth > 30
               else "params.zz: unknown parameter of " + kind)
        for path, body in (("/v1/faults", item), ("/v1/faults:batch", {"faults": [item]}),
                           ("/v1/faults:check", {"faults": [item]})):
            answer = requests.post(server.url + path, data=json.dumps(item if path ==
                                   "/v1/faults" else body), headers=headers, timeout=10)
            text = answer.text
            if path == "/v1/faults:check" and depth <= 30:  # per item: the check answers 200
                assert answer.status_code == 200, text
                [result] = answer.json()["results"]
                assert result["status"] == 400 and why in result["error"], result
            else:
                assert answer.status_code == 400, text
                assert why in text, text
        listed = requests.get(server.url + "/v1/faults", headers=headers, timeout=10)
        assert listed.json()["faults"] == []
    assert backend.applied == []
    lines = [json.loads(line) for line in audit.read_text().splitlines()]
    statuses = {(line["path"], line["status"]) for line in lines if "path" in line}
    assert {("/v1/faults", 400), ("/v1/faults:batch", 400),
            ("/v1/faults:check", 200 if depth <= 30 else 400)} <= statuses
