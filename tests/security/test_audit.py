"""Audit before effect, for every request (issue 25, item 4), on a live agent over mutual
TLS: an intent and an apply record before a change, deep nesting refused at parse with a
record, a request without a token leaves a bounded summary, the audit file reopened after
rotation (deleted, moved and ``SIGHUP``)."""

import json
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from gameday.errors import AgentError
from tests.security.conftest import LiveAgent, sleeper, unique


def post(agent: LiveAgent, path: str, body: bytes, token: str | None) -> bytes:
    """One request over a raw mutual-TLS connection; the whole answer."""
    with agent.tls_socket() as sock:
        auth = f"Authorization: Bearer {token}\r\n" if token else ""
        sock.sendall(f"POST {path} HTTP/1.1\r\nHost: a\r\n{auth}Content-Length: {len(body)}"
                     f"\r\nConnection: close\r\n\r\n".encode() + body)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
        return b"".join(chunks)


def wait_for(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 10
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_every_change_comes_after_its_durable_record(
        agent_with: Callable[..., LiveAgent]) -> None:
    marker = unique("gdsec-audited")
    agent = agent_with({"kinds": ["process.pause"], "processes": {"cmdline": [marker]}})
    proc = sleeper(marker)
    agent.started.append(proc)
    with agent.client() as client:
        fault = client.inject("process.pause", {"cmdline": marker}, {}, 1)
        wait_for(lambda: any(r.get("phase") == "revert" for r in agent.audit_records()),
                 "the lease reaper's revert audited")
    phases = [(r["phase"], r.get("fault_id")) for r in agent.audit_records()]
    assert phases.index(("intent", None)) < phases.index(("apply", fault["id"]))
    assert ("revert", fault["id"]) in phases  # the reaper's revert, no request asked


def test_deep_nesting_is_refused_at_parse_with_an_audit_line(
        agent_with: Callable[..., LiveAgent]) -> None:
    agent = agent_with({"kinds": ["process.pause"]})
    deep: object = "x"
    for _ in range(500):
        deep = {"a": deep}
    from tests.security.conftest import TOKEN
    body = json.dumps({"kind": "process.pause", "target": {"pid": 2}, "params": deep,
                       "lease_s": 5}).encode()
    answer = post(agent, "/v1/faults", body, TOKEN)
    assert answer.startswith(b"HTTP/1.1 400") and b"nested deeper" in answer
    last = agent.audit_records()[-1]
    assert last["status"] == 400 and last["path"] == "/v1/faults"
    with agent.client() as client:
        assert client.faults() == [] and client.health()["ok"]


def test_a_request_without_a_token_leaves_a_bounded_summary(
        agent_with: Callable[..., LiveAgent]) -> None:
    agent = agent_with({"kinds": ["process.pause"]})
    before = agent.audit.stat().st_size
    planted = unique("gdsec-planted-body").encode()
    for path in ("/healthz", "/v1/faults"):
        answer = post(agent, path, planted * (60_000 // len(planted)), None)
        assert answer.split(b" ", 2)[1] in (b"401", b"405")
    grown = agent.audit.stat().st_size - before
    assert grown < 1200, grown  # two summaries, not 120 KB of bodies
    assert planted not in agent.audit.read_bytes()
    summary = agent.audit_records()[-1]
    assert summary["phase"] == "unauthenticated" and summary["size"] >= 59_000


def test_the_audit_file_is_reopened_when_deleted_or_rotated(
        agent_with: Callable[..., LiveAgent]) -> None:
    agent = agent_with({"kinds": ["process.pause"]})
    with agent.client() as client, pytest.raises(AgentError):
        client.inject("process.pause", {"pid": 2}, {}, 5)
    os.unlink(agent.audit)  # deleted while the agent runs
    with agent.client() as client, pytest.raises(AgentError):
        client.inject("process.pause", {"pid": 3}, {}, 5)
    assert [f["target"] for r in agent.audit_records() if r["phase"] == "outcome"
            for f in r["faults"]] == [
        {"pid": 3}]
    rotated = agent.audit.with_suffix(".1")
    os.rename(agent.audit, rotated)  # as logrotate moves it, then sends SIGHUP
    agent.proc.send_signal(signal.SIGHUP)
    wait_for(agent.audit.exists, "a new audit file after SIGHUP")
    with agent.client() as client, pytest.raises(AgentError):
        client.inject("process.pause", {"pid": 4}, {}, 5)
    assert [f["target"] for r in agent.audit_records() if r["phase"] == "outcome"
            for f in r["faults"]] == [
        {"pid": 4}]
    assert agent.proc.poll() is None  # SIGHUP does not stop the agent
    assert Path(rotated).read_text().count('"pid":3') >= 1
