"""``POST /v1/faults:check`` and :meth:`AgentClient.check_many`: what an inject would
answer and what its target would hit, asked of real agents over loopback without
anything being applied: the lab's virtual GPUs (a stand-in: no NVML here), and the host
backend with a policy against real processes and real directories the test makes."""

import http.server
import json
import pathlib
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from gameday.agent.audit import AuditTrail
from gameday.agent.policy import load_policy
from gameday.agent.registry import Limits
from gameday.agent.server import AgentServer
from gameday.contract.backend import FaultRequest
from gameday.errors import AgentError, FaultRejected
from gameday.lab.devices import VirtualGpuBackend
from gameday.lab.nodebackend import NodeBackend
from gameday.node.host.backend import host_backend
from gameday.node.processes import NO_ALLOWED_MATCH, process_state
from gameday.wire.agent_client import AgentClient
from tests.agent.state_files import settled
from tests.node.net_support import netns_pair, sh

TOKEN = "5e3a9c1b7d2f48e6a0c4b8d2f6e0a4c8b2d6f0e4a8c2b6d0f4e8a2c6b0d4f8e2"


def _ecc(gpu: object, **extra: Any) -> dict[str, Any]:
    return {"kind": "gpu.ecc", "target": {"gpu": gpu},
            "params": {"kind": "single_bit", "count": 1}, "lease_s": 30, **extra}


def test_virtual_gpus_answer_what_an_inject_would_and_apply_nothing(
        tmp_path: pathlib.Path) -> None:
    backend = VirtualGpuBackend("n0", tmp_path / "gpus", gpus=2)
    limits = Limits(kinds=frozenset({"gpu.ecc", "gpu.xid"}), lease_max_s=60, max_active=2)
    audit = tmp_path / "audit.jsonl"
    with AgentServer(backend, token=TOKEN, node="n0", state_path=tmp_path / "state.json",
                     limits=limits, audit=AuditTrail(audit)) as server, \
            AgentClient(server.url, TOKEN) as client:
        held = client.inject("gpu.ecc", {"gpu": 0}, {"kind": "single_bit", "count": 1}, 30)
        state_before = settled(tmp_path / "state.json")
        gpus_before = backend.snapshot()
        results = client.check_many([
            _ecc(1),                                      # admissible
            _ecc(0),                                      # held already: 409
            _ecc(9),                                      # no such GPU: 400
            {"kind": "gpu.oom", "target": {"gpu": 1}, "lease_s": 30},  # not allowed: 403
            _ecc(1) | {"lease_s": 600},                   # over the lease cap: 403
            {"kind": "gpu.ecc", "target": {"gpu": 1}, "lease_s": "soon"},  # invalid: 400
            {"kind": "gpu.xid", "target": {"gpu": 1}, "params": {"xid": 79},
             "lease_s": 30},                              # one too many under max_active
        ])
        assert [r["index"] for r in results] == list(range(7))
        assert [r["status"] for r in results] == [200, 409, 400, 403, 403, 400, 429]
        assert [r["admissible"] for r in results] == [True] + [False] * 6
        assert results[0]["error"] is None
        assert results[0]["matches"] == {"gpus": [{"index": 1, "uuid": gpus_before[1].uuid,
                                                   "name": gpus_before[1].name}]}
        assert held["id"] in results[1]["error"]
        assert all(isinstance(r["error"], str) and "\n" not in r["error"]
                   for r in results[1:])
        # read-only: the same faults held, the same state file, the same GPUs
        assert [f["id"] for f in client.faults()] == [held["id"]]
        assert (tmp_path / "state.json").read_bytes() == state_before
        assert backend.snapshot() == gpus_before
    checks = [json.loads(line) for line in audit.read_text().splitlines()
              if json.loads(line).get("path") == "/v1/faults:check"]
    # audited, as any request: its intent, then its outcome
    assert [(c["phase"], c["status"]) for c in checks] == [("intent", None), ("outcome", 200)]


def test_a_check_body_that_is_not_a_list_of_faults_is_one_400(tmp_path: pathlib.Path) -> None:
    backend = VirtualGpuBackend("n0", tmp_path / "gpus", gpus=1)
    with AgentServer(backend, token=TOKEN, node="n0",
                     state_path=tmp_path / "state.json") as server, \
            AgentClient(server.url, TOKEN) as client:
        for body in ({}, {"faults": []}, {"faults": {}}, {"faults": [_ecc(0)], "x": 1}):
            with pytest.raises(AgentError) as error:
                client._call("POST", "/v1/faults:check", body)
            assert error.value.status == 400, body
        with pytest.raises(AgentError) as error:
            AgentClient(server.url, "wrong" * 10).check_many([_ecc(0)])
        assert error.value.status == 401


class _OldAgent(http.server.BaseHTTPRequestHandler):
    """An agent from before the check endpoint: every POST is an unknown endpoint."""

    def do_POST(self) -> None:
        body = b'{"error":"no such endpoint /v1/faults:check"}\n'
        self.send_response(404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def test_an_agent_without_the_endpoint_answers_404() -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _OldAgent)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        with AgentClient(f"http://127.0.0.1:{server.server_address[1]}", TOKEN) as client, \
                pytest.raises(AgentError) as error:
            client.check_many([_ecc(0)])
        assert error.value.status == 404
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def sleepers(tmp_path: pathlib.Path) -> Iterator[dict[str, subprocess.Popen[bytes]]]:
    """Harmless real processes the policy allows (``allowed``) and does not (``other``)."""
    procs = {name: subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)",
                                     f"gdcheck-{name}-{tmp_path.name}"])
             for name in ("allowed", "other")}
    try:
        yield procs
    finally:
        for proc in procs.values():
            proc.kill()
            proc.wait()


def test_host_backend_previews_processes_and_paths_through_its_policy(
        tmp_path: pathlib.Path, sleepers: dict[str, subprocess.Popen[bytes]]) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (tmp_path / "link").symlink_to(data)
    policy_file = tmp_path / "policy.yml"
    policy_file.write_text(json.dumps({
        "kinds": ["process.pause", "storage.stall"], "paths": [str(data)],
        "processes": {"cmdline": [f"gdcheck-allowed-{tmp_path.name}"]}}))
    backend = host_backend("host-n")
    backend.use_policy(load_policy(policy_file))
    allowed, other = sleepers["allowed"], sleepers["other"]
    with AgentServer(backend, token=TOKEN, node="host-n",
                     state_path=tmp_path / "state" / "agent.json") as server, \
            AgentClient(server.url, TOKEN) as client:
        items = [
            {"kind": "process.pause", "target": {"cmdline": f"gdcheck-allowed-{tmp_path.name}"},
             "lease_s": 10},
            {"kind": "process.pause", "target": {"pid": other.pid}, "lease_s": 10},
            {"kind": "process.pause", "target": {"cmdline": "(a+)+\\x00"}, "lease_s": 10},
            {"kind": "process.kill", "target": {"pid": allowed.pid}, "lease_s": 10},
            {"kind": "process.pause", "target": {"pid": allowed.pid},
             "params": {"duration_s": "abc"}, "lease_s": 10},
            {"kind": "process.pause", "target": {"pid": 1},
             "lease_s": 10},
        ]
        storage = [{"kind": "storage.stall", "target": {"path": str(data)}, "lease_s": 10},
                   {"kind": "storage.stall", "target": {"path": str(tmp_path / "link")},
                    "lease_s": 10},
                   {"kind": "storage.stall", "target": {"path": "/etc"}, "lease_s": 10}]
        fuse = "storage.stall" in backend.kinds()
        results = client.check_many(items + (storage if fuse else []))
        first = results[0]
        assert first["admissible"] and first["status"] == 200
        assert first["matches"]["processes"] == [
            {"pid": allowed.pid, "command": " ".join([sys.executable, "-c",
                                                      "import time; time.sleep(60)",
                                                      f"gdcheck-allowed-{tmp_path.name}"])}]
        # a process the policy does not allow reads exactly as no process at all
        for index in (1, 2, 5):
            assert results[index]["status"] == 403
            assert results[index]["error"].endswith(NO_ALLOWED_MATCH)
        assert results[3]["status"] == 403  # process.kill: not in the policy's kinds
        assert results[4]["status"] == 400 and "duration_s" in results[4]["error"]
        if fuse:
            assert results[6]["matches"] == {"paths": [str(data.resolve())]}
            assert results[7]["status"] == 400 and "symlink" in results[7]["error"]
            assert results[8]["status"] == 403
        assert client.faults() == []
    for proc in (allowed, other):
        assert process_state(proc.pid) != "T"  # nothing was stopped


def test_host_backend_previews_interfaces_in_a_test_made_namespace(
        tmp_path: pathlib.Path) -> None:
    if "net.link_flap" not in host_backend("probe").kinds():
        pytest.skip("no netlink as root here")
    policy_file = tmp_path / "policy.yml"
    policy_file.write_text(json.dumps({"kinds": ["net.link_flap", "net.loss"],
                                       "interfaces": ["*"]}))
    backend = host_backend("host-n")
    backend.use_policy(load_policy(policy_file))
    with netns_pair() as pair, \
            AgentServer(backend, token=TOKEN, node="host-n",
                        state_path=tmp_path / "state" / "agent.json") as server, \
            AgentClient(server.url, TOKEN) as client:
        nft = ["ip", "netns", "exec", pair.a, "nft", "list", "ruleset"]
        rules_before = sh(*nft, check=False).stdout if shutil.which("nft") else ""
        results = client.check_many([
            {"kind": "net.link_flap", "target": {"link": pair.link_a, "netns": pair.a},
             "params": {"down_s": 1, "up_s": 1}, "lease_s": 10},
            {"kind": "net.loss", "target": {"netns": pair.a}, "params": {"percent": 50},
             "lease_s": 10},
            {"kind": "net.link_flap", "target": {"link": 'x"\n}', "netns": pair.a},
             "lease_s": 10},
            {"kind": "net.link_flap", "target": {"link": "gdnnone", "netns": pair.a},
             "lease_s": 10}])
        assert results[0]["matches"]["interfaces"] == [pair.link_a]
        assert sorted(results[1]["matches"]["interfaces"]) == sorted(["lo", pair.link_a])
        assert [r["status"] for r in results] == [200, 200, 400, 400]
        state = sh("ip", "-n", pair.a, "-j", "link", "show", pair.link_a).stdout
        assert json.loads(state)[0]["operstate"] == "UP"  # nothing was taken down
        assert (sh(*nft, check=False).stdout if shutil.which("nft") else "") == rules_before
        assert client.faults() == []


def test_a_lab_node_answers_checks_for_its_gpus_and_refuses_unknown_kinds(
        tmp_path: pathlib.Path) -> None:
    node = NodeBackend(VirtualGpuBackend("lab-0", tmp_path / "gpus", gpus=2), [])
    with AgentServer(node, token=TOKEN, node="lab-0", state_path=tmp_path / "state.json"
                     ) as server, AgentClient(server.url, TOKEN) as client:
        gpu, bad = client.check_many([_ecc(1), _ecc(0) | {"params": {"count": -1}}])
        assert gpu["matches"]["gpus"][0]["index"] == 1 and gpu["status"] == 200
        assert bad["status"] == 400 and not bad["admissible"] and bad["matches"] == {}
        assert client.faults() == []
    with pytest.raises(FaultRejected, match="not supported by the lab node"):
        node.check(FaultRequest("net.nothing", {}, {}))
