"""What the audit trail keeps of a request's body, read back from the trail's file: for
random authenticated requests over real HTTP (single and batch injects whose targets and
parameters hold keys naming secrets at any depth and ``env`` values, batch reverts, bodies
that are not JSON or not objects), the ``intent`` and ``outcome`` records of each request
keep the same fields, exactly ``shown_of`` of the decoded body, and no secret planted in
a body is anywhere in the file. Real: an in-process AgentServer with its audit trail on
disk, the marker backend (tests/agent/agent_marker.py) applying what is admissible."""

import itertools
import json
import pathlib
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gameday.agent.audit import AuditTrail, shown_of
from gameday.agent.server import AgentServer
from gameday.logs import SECRET_WORDS
from tests.agent.agent_marker import KIND, MarkerBackend
from tests.agent.test_agent_http import TOKEN, raw

_planted = itertools.count()


def secret() -> str:
    """A value that must never reach the trail, unique to the example."""
    return f"PLANTED-{next(_planted):06d}-s3cr3t"


secret_names = st.builds(lambda before, word, after: before + word + after,
                         st.sampled_from(["", "x_", "Upstream"]),
                         st.sampled_from(SECRET_WORDS).map(str.upper)
                         | st.sampled_from(SECRET_WORDS),
                         st.sampled_from(["", "_file", "2"]))
plain = st.integers(-5, 5) | st.text(st.characters(codec="ascii"), max_size=4) | st.none()
plain_names = st.sampled_from(["gpu", "pid", "name", "labels", "note", "path"])


@st.composite
def holding_secrets(draw: st.DrawFn, depth: int = 0) -> dict[str, Any]:
    """An object with plain keys, keys naming a secret and (maybe) an ``env``, whose
    secret values may sit deeper inside."""
    out: dict[str, Any] = {}
    for _ in range(draw(st.integers(0, 3))):
        out[draw(plain_names)] = (draw(holding_secrets(depth + 1))
                                  if depth < 3 and draw(st.booleans()) else draw(plain))
    for _ in range(draw(st.integers(0, 2))):
        out[draw(secret_names)] = (secret() if draw(st.booleans())
                                   else {"inner": secret(), "list": [secret()]})
    if draw(st.booleans()):
        out["env"] = {"HOME": secret(), "DEEP": {"x": [secret()]}}
    return out


@st.composite
def inject_items(draw: st.DrawFn) -> dict[str, Any]:
    params: dict[str, Any] = (draw(st.sampled_from([{}, {"api_token": secret()},
                                                    {"note": "n", "api_token": secret()}]))
                              if draw(st.booleans()) else draw(holding_secrets()))
    target = {"gpu": draw(st.integers(0, 400)), **draw(holding_secrets(2))}
    return {"kind": KIND, "target": target, "params": params, "lease_s": 30}


requests = st.one_of(
    inject_items().map(lambda item: ("POST", "/v1/faults", json.dumps(item))),
    st.lists(inject_items(), min_size=1, max_size=4).map(
        lambda items: ("POST", "/v1/faults:batch", json.dumps({"faults": items}))),
    st.lists(st.text(st.characters(codec="ascii"), min_size=1, max_size=8), min_size=1,
             max_size=3).map(lambda ids: ("POST", "/v1/faults:batch-revert",
                                          json.dumps({"ids": ids}))),
    st.sampled_from([("POST", "/v1/faults", "not json {"),
                     ("POST", "/v1/faults", "[1, 2]"),
                     ("POST", "/v1/faults:batch", '"a string"')]),
)


@pytest.fixture(scope="module")
def audited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[AgentServer, pathlib.Path]]:
    root = tmp_path_factory.mktemp("audited")
    trail = root / "audit.jsonl"
    server = AgentServer(MarkerBackend(root / "markers"), token=TOKEN, node="n-audit",
                         state_path=root / "agent.json", audit=AuditTrail(trail)).start()
    try:
        yield server, trail
    finally:
        server.stop()


@settings(max_examples=120, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(request=requests)
def test_intent_and_outcome_keep_the_same_redacted_body_and_no_secret(
        audited: tuple[AgentServer, pathlib.Path], request: tuple[str, str, str]) -> None:
    server, trail = audited
    method, path, body = request
    before = trail.stat().st_size if trail.exists() else 0
    status, _, _ = raw(server, method, path, body)
    written = trail.read_bytes()[before:]
    records = [json.loads(line) for line in written.splitlines()]
    mine = [r for r in records if r.get("phase") in ("intent", "outcome")]
    assert [r["phase"] for r in mine] == ["intent", "outcome"], records
    assert mine[1]["status"] == status and mine[0]["status"] is None
    try:
        decoded: object = json.loads(body)
    except ValueError:
        decoded = None
    expected = shown_of(decoded)
    common = {"time", "phase", "source", "identity", "token", "method", "path", "status"}
    for record in mine:
        assert {k: v for k, v in record.items() if k not in common} == expected
    assert b"PLANTED-" not in written, written
