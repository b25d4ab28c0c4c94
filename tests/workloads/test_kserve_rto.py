"""gameday's RTO interval against KServe's own model server (the ``kserve`` package, in
``.venv-kserve``), one server for the module, under a supervisor that restarts it, with
the host backend's real faults and an independent ground truth
(:class:`tests.workloads.rto_truth.DenseProber`, 5 ms, fresh connections):

- ``process.kill`` (SIGKILL): the port refuses until the restarted server listens;
- ``process.pause`` for 3 s (SIGSTOP, then SIGCONT): the kernel still accepts
  connections, the server holds every request and answers them on release;
- ``service.latency`` 500 ms for 2 s (the host's transparent proxy): answers arrive
  later than the SLI's timeout, then on time again.

Each test asserts that the truth lies in ``recovered_between`` and prints the errors
(``U - truth``, ``truth - L``); docs/verifiers.md gives the measured figures."""

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import requests

from gameday.contract.backend import FaultRequest
from gameday.engine.session import current, deactivate
from gameday.node.host.process import HostSignalFault
from gameday.node.host.proxy import ServiceProxyFault
from tests.verifiers.verifier_helpers import new_session, record_fault
from tests.workloads.rto_truth import DenseProber, errors
from tests.workloads.test_kserve_v2 import PYTHON, Supervisor
from verifiers.rto import measure_recovery
from verifiers.sli import recorder_for

pytestmark = pytest.mark.skipif(
    not PYTHON.exists(),
    reason=f"no KServe environment at {PYTHON} (make setup builds .venv-kserve)",
)
INTERVAL_S = 0.05
SLI_TIMEOUT_S = 0.25
READY = '"ready":true'


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Supervisor]:
    root = tmp_path_factory.mktemp("kserve-rto")
    supervisor = Supervisor(root)
    wait_ready(supervisor, root)
    yield supervisor
    supervisor.close()


def wait_ready(supervisor: Supervisor, root: Path) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            if requests.get(ready_url(supervisor), timeout=1).status_code == 200:
                return
        except requests.RequestException:
            pass
        assert time.monotonic() < deadline, (root / "server.log").read_text()[-2000:]
        time.sleep(0.1)


def ready_url(supervisor: Supervisor) -> str:
    return f"http://127.0.0.1:{supervisor.port}/v2/models/linear/ready"


def measure(supervisor: Supervisor, kind: str, inject: Callable[[], None]) -> dict[str, float]:
    """Start gameday's recorder and the prober, inject, measure; the errors."""
    url = ready_url(supervisor)
    session = new_session()
    session.recorder = recorder_for(
        {"http": url, "interval_s": INTERVAL_S, "timeout_s": SLI_TIMEOUT_S, "expect_body": READY},
        session.clock,
    )
    session.recorder.start()
    prober = DenseProber(url, correct_within_s=SLI_TIMEOUT_S, expect=READY)
    try:
        time.sleep(0.5)
        inject()
        record_fault(session, kind=kind)
        result = measure_recovery(stable_for_s=1.0, expect_outage=True, timeout_s=60, detect={})
        time.sleep(0.3)  # the prober's answers to the last requests before it closes
        truth = prober.truth(result["onset"])
    finally:
        prober.close()
        current().recorder.stop()  # type: ignore[union-attr]
        deactivate()
    measured = errors(result, truth)
    print(
        f"kserve {kind}: {measured} rto {result['rto_s']:.3f} s "
        f"± {result['rto_resolution_s']}"
    )
    low, high = result["recovered_between"]
    assert low - 1e-3 <= truth <= high + 1e-3, (measured, result["timeline"])
    return measured


def test_sigkill_under_a_supervisor_refuses_and_the_interval_holds_the_truth(
    server: Supervisor,
) -> None:
    starts = len(server.starts)

    def sigkill() -> None:
        killed = HostSignalFault("process.kill").apply(
            "k-1",
            FaultRequest("process.kill", {"cmdline": f"kserve_model.py --port {server.port} "}),
        )
        assert killed["processes"][0]["pid"] != 0

    measure(server, "process.kill", sigkill)
    assert len(server.starts) == starts + 1  # the supervisor restarted it once


def measure_held(supervisor: Supervisor, fault: HostSignalFault | ServiceProxyFault,
                 request: FaultRequest) -> None:
    """Apply a fault that clears by itself (its ``duration_s``), measure, and revert it
    whatever the measurement did."""
    try:
        measure(supervisor, request.kind, lambda: fault.apply("held-1", request))
    finally:
        fault.revert("held-1", request)


def test_sigstop_for_3_s_holds_requests_and_the_interval_holds_the_truth(
    server: Supervisor,
) -> None:
    measure_held(server, HostSignalFault("process.pause"),
                 FaultRequest("process.pause", {"pid": server.process.pid}, {"duration_s": 3.0}))


def test_added_latency_past_the_sli_timeout_and_the_interval_holds_the_truth(
    server: Supervisor,
) -> None:
    fault = ServiceProxyFault("service.latency", prefix="gdtest")
    if fault.unavailable():  # the host has no nftables/iptables redirect: truly absent here
        pytest.skip(str(fault.unavailable()))
    measure_held(server, fault, FaultRequest("service.latency", {"port": server.port},
                                             {"delay_ms": 500.0, "duration_s": 2.0}))
