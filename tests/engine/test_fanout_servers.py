"""The fan-out (:func:`gameday.engine.fanout.fan_out`) against real servers that answer,
refuse, answer late, are busy once, reset the connection, tear an answer or never
answer, mixed at random across nodes and read at random widths: a property.

Real: loopback TCP servers (``tests.loopback``), the agent client's wire and its
kept-alive connections, the fan-out's one ``select.poll`` object. Each server speaks
just enough of the agent API's ``POST /v1/faults:batch-revert`` for the fan-out.
"""

import json
import os
import re
import socket
import threading
import time
from contextlib import ExitStack
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gameday.engine.fanout import FanoutOptions, Then, fan_out
from gameday.errors import AgentError
from gameday.wire.agent_client import AgentClient, BatchResult
from tests.loopback import serving_each

BEHAVIOURS = ("ok", "slow", "busy_once", "refuse", "reset", "torn", "hold")
#: (value is the job's id, status of the error, attempts) each behaviour ends with
EXPECTED: dict[str, tuple[bool, int | None, int]] = {
    "ok": (True, None, 1), "slow": (True, None, 1), "busy_once": (True, None, 2),
    "refuse": (False, 400, 1), "reset": (False, None, 2), "torn": (False, None, 2),
    "hold": (False, None, 2)}
TIMEOUT_S = 0.3


def _request_body(conn: socket.socket) -> bytes | None:
    """One request's body, or ``None`` once the client closed the connection."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return None
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    found = re.search(rb"(?im)^content-length:\s*(\d+)", head)
    length = int(found.group(1)) if found else 0
    while len(body) < length:
        chunk = conn.recv(65536)
        if not chunk:
            return None
        body += chunk
    return body


def _answer(status: int, payload: object) -> bytes:
    body = json.dumps(payload).encode()
    return (f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


def _server(behaviour: str) -> Any:
    """The handler of a server that behaves as ``behaviour`` (keep-alive: requests are
    read one after the other on a connection until the client closes it)."""
    seen = [0]

    def handle(conn: socket.socket, stop: threading.Event) -> None:
        while not stop.is_set():
            body = _request_body(conn)
            if body is None:
                return
            seen[0] += 1
            ids = json.loads(body)["ids"]
            if behaviour == "reset":
                return
            if behaviour == "torn":
                conn.sendall(b'HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{"fau')
                return
            if behaviour == "hold":  # until the client gives up and closes
                conn.settimeout(0.02)
                while not stop.is_set():
                    try:
                        if not conn.recv(1):
                            return
                    except TimeoutError:
                        continue
                return
            if behaviour == "refuse":
                conn.sendall(_answer(400, {"error": "refused by the test"}))
                continue
            if behaviour == "busy_once" and seen[0] == 1:
                conn.sendall(_answer(503, {"error": "busy"}))
                continue
            if behaviour == "slow":
                time.sleep(0.05)
            conn.sendall(_answer(200, {"faults": [{"id": i} for i in ids], "failed": []}))

    return handle


def _open_fds() -> int:
    """The process's open sockets (what the fan-out and its clients open). Only sockets:
    another test's thread still finishing in this worker process (a state writer's
    temporary file, a log file) may hold a file for a moment, which is not this test's
    to count."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            count += os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
        except OSError:  # closed meanwhile (or listdir's own descriptor)
            continue
    return count


@settings(max_examples=20, deadline=None)
@given(nodes=st.lists(st.tuples(st.sampled_from(BEHAVIOURS), st.integers(1, 3)),
                      min_size=1, max_size=6),
       width=st.integers(1, 4))
def test_every_job_ends_as_its_server_behaved_and_nothing_is_left_open(
        nodes: list[tuple[str, int]], width: int) -> None:
    """Whatever the mix of servers and the width: each job's outcome comes in the order
    of the jobs and is what its node's server did (its ids answered; a refusal once; a
    failure that may pass, tried again until the attempts run out), and once the
    clients are closed no descriptor the fan-out opened is left."""
    before = _open_fds()
    with ExitStack() as stack:
        urls = {f"n{i}": stack.enter_context(serving_each(_server(behaviour)))
                for i, (behaviour, _) in enumerate(nodes)}
        clients = {node: AgentClient(url, "token", timeout_s=TIMEOUT_S)
                   for node, url in urls.items()}
        jobs = [(f"n{i}", f"f-{i}-{k}") for i, (_, count) in enumerate(nodes)
                for k in range(count)]

        def call(node: str, batch: list[tuple[str, str]]) -> Then[BatchResult]:
            ids = [job_id for _, job_id in batch]

            def finish(answer: Any) -> list[Any]:
                result: BatchResult = answer()
                return [job_id if job_id in result.done
                        else result.failed.get(job_id, AgentError(f"{job_id}: no answer"))
                        for job_id in ids]

            return Then(clients[node].start_revert_many(ids, minimal=True), finish)

        outcomes = fan_out(jobs, lambda job: job[0], call,
                           FanoutOptions(concurrency=width, attempts=2, backoff_s=0.001))
        assert [o.job for o in outcomes] == jobs
        for outcome in outcomes:
            behaviour = nodes[int(outcome.job[0][1:])][0]
            answered, status, attempts = EXPECTED[behaviour]
            assert outcome.attempts == attempts, (behaviour, outcome)
            if answered:
                assert outcome.error is None and outcome.value == outcome.job[1], behaviour
            else:
                assert isinstance(outcome.error, AgentError), (behaviour, outcome)
                assert outcome.error.status == status, (behaviour, outcome.error)
        for client in clients.values():
            client.close()
    assert _open_fds() <= before  # the servers stopped, their connections closed too
