"""verifiers.replacement and verifiers.units: a real self-healing controller (a process
supervisor of replica processes, tests/workloads/replica_controller.py) whose replica
is killed with the host backend's SIGKILL, timed against an independent 5 ms prober of
the replica's port; Kubernetes pods through the Kubernetes API stand-in
(gameday.testing.kube, real HTTP and the real kubernetes client; the stand-in has no
controllers, so a thread of the test plays the ReplicaSet controller); the ready
mappings on documents in each API's own schema; and the check itself as a property."""

import http.client
import json
import re
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from chaoslib.exceptions import ActivityFailed
from hypothesis import given, settings
from hypothesis import strategies as st

from gameday.contract.backend import FaultRequest
from gameday.engine.session import deactivate
from gameday.node.host.process import HostSignalFault
from gameday.testing.kube import KubeStandin, running_standin
from tests.verifiers.verifier_helpers import free_port, new_session, only_result, record_fault
from tests.waiting import wait_until
from verifiers.replacement import ReplacementCheck, verify_replacement
from verifiers.units import MAPPINGS, Unit, UnitMapping, UnitsError, UnitSnapshot

CONTROLLER = Path(__file__).resolve().parent.parent / "workloads" / "replica_controller.py"
MAPPING = {"units": "replicas", "id": "to_string(pid)", "state": "state",
           "ready_states": ["running"], "since": "since"}


def read_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=2) as answer:
        return json.loads(answer.read())


class Controller:
    """The replica controller process with 3 replicas."""

    def __init__(self) -> None:
        self.id = f"gameday-test-{uuid.uuid4().hex[:8]}"
        self.port, self.replica_ports = free_port(), [free_port() for _ in range(3)]
        self.url = f"http://127.0.0.1:{self.port}/replicas"
        self.process = subprocess.Popen(
            [sys.executable, str(CONTROLLER), "--port", str(self.port), "--replica-ports",
             ",".join(map(str, self.replica_ports)), "--id", self.id])
        wait_until(self.all_running, 30, "3 running replicas")

    def replicas(self) -> list[dict[str, Any]]:
        try:
            return list(read_json(self.url)["replicas"])
        except OSError:
            return []

    def all_running(self) -> bool:
        found = self.replicas()
        return len(found) == 3 and all(r["state"] == "running" for r in found)

    def kill(self, slot: int) -> int:
        details = HostSignalFault("process.kill").apply("f-1", FaultRequest("process.kill", {
            "env": {"GAMEDAY_TEST_CONTROLLER": self.id, "GAMEDAY_TEST_SLOT": str(slot)}}))
        return int(details["processes"][0]["pid"])

    def close(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=20)


@pytest.fixture
def controller() -> Iterator[Controller]:
    running = Controller()
    yield running
    running.close()
    deactivate()


def probe_until_new(port: int, old_pid: int, answers: list[float],
                    stop: threading.Event) -> None:
    """Every 5 ms, the instant the slot's port first answers with another pid."""
    while not stop.is_set():
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz",
                                        timeout=0.2) as answer:
                if answer.read().decode() != str(old_pid):
                    answers.append(time.time())
                    return
        except (OSError, http.client.HTTPException):  # killed mid-answer: no answer yet
            pass
        time.sleep(0.005)


def test_a_killed_replica_is_replaced_by_a_new_healthy_one(controller: Controller) -> None:
    before = {str(r["pid"]) for r in controller.replicas()}
    session = new_session(rto_s=20)
    old_pid = next(r["pid"] for r in controller.replicas() if r["slot"] == 1)
    answers: list[float] = []
    stop = threading.Event()
    prober = threading.Thread(target=probe_until_new, args=(
        controller.replica_ports[1], old_pid, answers, stop), daemon=True)
    prober.start()
    record_fault(session, kind="process.kill")
    assert controller.kill(1) == old_pid
    try:
        result = verify_replacement({"url": controller.url, "mapping": MAPPING},
                                    faulted=str(old_pid), timeout_s=30, interval_s=0.1)
        prober.join(timeout=10)
    finally:
        stop.set()
    now = {str(r["pid"]) for r in controller.replicas()}
    assert result["met"] is True and result["others"] == sorted(before - {str(old_pid)})
    assert result["replaced_by"] == sorted(now - before) and len(result["replaced_by"]) == 1
    assert result["timed_by"] == "controller" and result["detected"]["by"] == "controller"
    # the controller counts the replica running once its health check answered: after
    # the prober's first answer (5 ms resolution), within the controller's 50 ms loop
    truth = answers[0] - result["onset"]
    assert truth - 0.01 <= result["time_to_replace_s"] <= truth + 0.5, (truth, result)
    assert 0 <= result["time_to_detect_s"] <= result["time_to_replace_s"]
    assert only_result(session).reason.startswith(
        f"replaced {old_pid} by {result['replaced_by'][0]} in ")
    print(f"truth {truth:.3f} s, measured {result['time_to_replace_s']:.3f} s")


def test_another_replica_disturbed_fails_and_so_does_a_missed_rto(
        controller: Controller) -> None:
    session = new_session()
    pids = {r["slot"]: r["pid"] for r in controller.replicas()}
    record_fault(session, kind="process.kill")
    controller.kill(1)
    controller.kill(2)  # not the one the experiment meant to take down
    with pytest.raises(ActivityFailed, match=rf"^another unit was disturbed while "
                                             rf"{pids[1]} was replaced: "
                                             rf"(unit {pids[2]} |new units \d+, \d+ for 1 "
                                             rf"faulted)"):
        verify_replacement({"url": controller.url, "mapping": MAPPING},
                           faulted=str(pids[1]), timeout_s=20, interval_s=0.05)
    deactivate()
    wait_until(controller.all_running, 30, "3 running replicas again")
    session = new_session(rto_s=0.001)
    pid = next(r["pid"] for r in controller.replicas() if r["slot"] == 0)
    record_fault(session, kind="process.kill")
    controller.kill(0)
    with pytest.raises(ActivityFailed, match=rf"^replaced {pid} by \d+ in \d+\.\d s > rto "
                                             rf"0.001 s \(missed by "):
        verify_replacement({"url": controller.url, "mapping": MAPPING}, faulted=str(pid),
                           timeout_s=20, interval_s=0.1)


def test_a_kubernetes_replicaset_through_the_api_standin() -> None:
    """The stand-in serves pods over real HTTP to the real kubernetes client; a thread
    of the test plays the ReplicaSet controller: a deleted pod is replaced by a new one,
    not Ready, then Ready 0.3 s later with its condition's lastTransitionTime."""
    from kubernetes import client

    with running_standin() as api:
        for index in range(3):
            api.add_pod("serve", f"web-{index}", "node-0", labels={"app": "web"})
        api.add_pod("serve", "other-0", "node-0", labels={"app": "other"})
        stop = threading.Event()
        made: list[tuple[str, float]] = []
        rs = threading.Thread(target=replicaset, args=(api, stop, made), daemon=True)
        rs.start()
        configuration = client.Configuration()
        configuration.host = api.url
        configuration.api_key = {"authorization": f"Bearer {api.token}"}
        core = client.CoreV1Api(client.ApiClient(configuration))
        session = new_session(rto_s=10)
        record_fault(session, kind="pod.delete")
        core.delete_namespaced_pod("web-1", "serve")
        try:
            result = verify_replacement(
                {"kubernetes": {"namespace": "serve", "selector": "app=web",
                                "k8s_api_url": api.url, "k8s_api_token": api.token}},
                faulted="web-1", timeout_s=10, interval_s=0.05)
        finally:
            stop.set()
            rs.join(timeout=5)
        assert result["replaced_by"] == [made[0][0]] and result["others"] == ["web-0", "web-2"]
        assert result["timed_by"] == "controller"
        assert result["replaced_at"] == pytest.approx(made[0][1], abs=1e-3)
        assert result["met"] is True
        deactivate()


def replicaset(api: KubeStandin, stop: threading.Event, made: list[tuple[str, float]]) -> None:
    """Keep 3 pods labelled app=web in namespace serve (the test's controller)."""
    serial = 0
    while not stop.is_set():
        with api.lock:
            web = [name for (ns, name), pod in api.pods.items()
                   if ns == "serve" and pod["metadata"]["labels"].get("app") == "web"]
        if len(web) < 3:
            serial += 1
            name = f"web-new{serial}"
            api.add_pod("serve", name, "node-1", labels={"app": "web"}, ready=False)
            time.sleep(0.3)
            ready_at = time.time()
            with api.lock:
                api.pods[("serve", name)]["status"]["conditions"] = [{
                    "type": "Ready", "status": "True", "lastTransitionTime":
                    datetime.fromtimestamp(ready_at, UTC).isoformat()}]
            made.append((name, ready_at))
        time.sleep(0.02)


RAY_SERVE = {  # the shape of Ray Serve's GET /api/serve/applications/ (ServeInstanceDetails)
    "controller_info": {"node_id": "n1"}, "proxy_location": "EveryNode",
    "applications": {"app1": {"name": "app1", "status": "RUNNING", "deployments": {
        "Model": {"name": "Model", "status": "HEALTHY", "replicas": [
            {"replica_id": "abc", "state": "RUNNING", "pid": 11, "start_time_s": 1.0},
            {"replica_id": "def", "state": "STARTING", "pid": 12, "start_time_s": 2.0}]},
        "Router": {"name": "Router", "status": "HEALTHY", "replicas": [
            {"replica_id": "ghi", "state": "RUNNING", "pid": 13, "start_time_s": 1.5}]}}}}}


def test_the_ready_mappings_read_each_apis_own_schema() -> None:
    units = MAPPINGS["ray_serve"].apply(RAY_SERVE, "ray")
    assert [(u.id, u.ready) for u in units] == [("abc", True), ("def", False), ("ghi", True)]
    pods = {"kind": "PodList", "items": [
        {"metadata": {"name": "a"}, "status": {"phase": "Running", "conditions": [
            {"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}},
        {"metadata": {"name": "b", "deletionTimestamp": "2026-01-01T00:00:01Z"},
         "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}]}
    assert MAPPINGS["kubernetes"].apply(pods, "k8s") == (
        Unit("a", "Running", True, 1767225600.0), Unit("b", "Terminating", False, None))


@pytest.mark.parametrize(("document", "message"), [
    ({"shards": [], "gpus": []}, "ray: mapping.units 'values(applications)[]."
     "values(deployments)[].replicas[]' does not fit an object with keys gpus, shards: "
     "In function values(), invalid type for value: None"),
    ({"applications": {"a": {"deployments": {"D": {"replicas": [{"state": "RUNNING"}]}}}}},
     "ray: units[0]: mapping.id 'replica_id' gave None in an object with keys state"),
    ({"applications": {}}, None),
    ([1, 2], "ray: mapping.units 'values(applications)[].values(deployments)[].replicas[]' "
     "does not fit a JSON list: In function values()"),
])
def test_json_that_does_not_fit_the_mapping_is_an_error_naming_the_path(
        document: Any, message: str | None) -> None:
    if message is None:  # (an empty serve instance: no units, and rightly so)
        assert MAPPINGS["ray_serve"].apply(document, "ray") == ()
        return
    with pytest.raises(UnitsError) as caught:
        MAPPINGS["ray_serve"].apply(document, "ray")
    assert str(caught.value).startswith(message)
    assert MAPPINGS["kubernetes"].apply({"items": []}, "k8s") == ()
    with pytest.raises(UnitsError, match=r"^k8s: mapping.units 'items' matched nothing in "
                                         r"an object with keys"):
        MAPPINGS["kubernetes"].apply(document if isinstance(document, dict) else {}, "k8s")


def test_mapping_specs_are_checked_before_anything_is_read() -> None:
    for spec, message in (("nope", "mapping 'nope' is not a ready mapping"),
                          ({"units": "a", "id": "b"}, "mapping needs exactly one of ready"),
                          ({"units": "a[", "id": "b", "ready": "c"}, "mapping.units 'a['"),
                          ({"units": "a", "id": "b", "readiness": "c"},
                           "mapping has unknown key 'readiness'")):
        with pytest.raises(UnitsError, match=f"^{re.escape(message)}"):
            UnitMapping.from_spec(spec)
    session = new_session()
    record_fault(session, kind="process.kill")
    with pytest.raises(ActivityFailed, match=r"^verify_replacement: units.mapping is needed"):
        verify_replacement({"url": "http://127.0.0.1:9/x"}, faulted="1")
    deactivate()


@settings(max_examples=200, deadline=None)
@given(others=st.integers(0, 4), down_after=st.integers(0, 5), up_after=st.integers(0, 8),
       disturb_at=st.one_of(st.none(), st.integers(0, 12)), readings=st.integers(1, 14))
def test_the_check_passes_exactly_when_the_controller_healed_the_unit_alone(
        others: int, down_after: int, up_after: int, disturb_at: int | None,
        readings: int) -> None:
    """Property: a controller's readings (one a second after the onset): the faulted
    unit stays ready for ``down_after`` readings, then is gone; a new unit is listed
    not ready, and ready ``up_after`` readings later; another unit may drop out at
    ``disturb_at`` (the others, as first read, one fewer from then). The check says
    replaced exactly when the new unit was ready by the last reading and nothing else
    was disturbed; the instant it states is the reading that first showed it, and never
    before the onset."""
    check = ReplacementCheck(faulted={"f"}, onset=0.0)
    ready_from = down_after + 1 + up_after
    # (a unit gone before the first reading is not one of the others)
    disturbed = disturb_at is not None and others > 0 and 0 < disturb_at < readings
    for index in range(readings):
        t = 1.0 + index
        units = [Unit(f"o{n}", "running", True) for n in range(others)
                 if not (n == 0 and disturb_at is not None and index >= disturb_at)]
        if index < down_after:
            units.append(Unit("f", "running", True))
        elif index > down_after:
            units.append(Unit("new", "running" if index >= ready_from else "starting",
                              index >= ready_from))
        check.observe(UnitSnapshot(t, tuple(units)))
    healed = readings > ready_from
    assert bool(check.disturbed) == disturbed
    assert check.replaced == (healed and not disturbed)
    if check.replaced:
        assert check.replaced_at is not None and check.replaced_at.t == 1.0 + ready_from
        assert check.replaced_at.low == max(0.0, ready_from)
    if check.detected is not None:
        assert check.detected.t == 1.0 + down_after and check.detected.low >= 0.0


@settings(max_examples=300, deadline=None)
@given(down=st.floats(0.0, 6.0), up_after=st.floats(0.0, 6.0),
       gaps=st.lists(st.tuples(st.floats(0.0, 0.5), st.floats(0.0, 2.0), st.floats(0.0, 1.0)),
                     min_size=1, max_size=40))
def test_a_polled_instant_holds_the_true_transition_whatever_the_api_latency(
        down: float, up_after: float, gaps: list[tuple[float, float, float]]) -> None:
    """Property: the faulted unit truly goes down at ``down`` and its replacement is
    truly ready at ``down + up_after`` (seconds after the onset, 0). Readings are one
    after another; each waits a gap, is sent, and the API makes its document at a random
    point of a random latency (``gaps``: wait, latency, where in it), as a slow or
    queueing controller would. Whenever the check times a transition by polling, the
    true instant lies in ``[low, t]``: the request of the reading before, the arrival
    of the one that showed it."""
    ready_at = down + up_after
    check = ReplacementCheck(faulted={"f"}, onset=0.0)
    clock = 0.0
    for wait, latency, where in gaps:
        sent = clock + wait
        made = sent + latency * where
        clock = sent + latency
        units = [Unit("o", "running", True)]
        if made < down:
            units.append(Unit("f", "running", True))
        else:
            units.append(Unit("f", "dead", False))
            units.append(Unit("new", "running" if made >= ready_at else "starting",
                              made >= ready_at))
        check.observe(UnitSnapshot(clock, tuple(units), sent=sent))
    if check.detected is not None:
        assert check.detected.by == "poll"
        assert check.detected.low <= down <= check.detected.t, (check.detected, down)
    if check.replaced:
        assert check.replaced_at is not None
        assert check.replaced_at.low <= ready_at <= check.replaced_at.t, (
            check.replaced_at, ready_at)


def test_units_headers_go_with_a_url_and_are_never_echoed() -> None:
    from verifiers.units import HttpUnitSource, unit_source

    source = unit_source({"url": "http://127.0.0.1:9/x", "mapping": "ray_serve",
                          "headers": {"Authorization": "Bearer s3cret"}})
    assert isinstance(source, HttpUnitSource)
    assert source.headers == {"Authorization": "Bearer s3cret"}
    with pytest.raises(UnitsError) as caught:
        unit_source({"url": "http://127.0.0.1:9/x", "mapping": "ray_serve",
                     "headers": {"Authorization": 12345678}})
    assert str(caught.value) == "units.headers must map header names to strings"
    with pytest.raises(UnitsError, match=r"^units.headers goes with a url"):
        unit_source({"kubernetes": {"selector": "app=web"}, "headers": {"A": "b"}})
