"""KServe's own Python model server (the ``kserve`` package from PyPI, in its own virtual
environment ``.venv-kserve`` that ``make setup`` builds: its pins would downgrade
packages of the project's) speaking the KServe V2 protocol: killed with the host
backend's SIGKILL and restarted by a supervisor the test runs. gameday's RTO (the run's
recorder, readiness every 100 ms) is compared with an independent prober sampling the
same readiness every 5 ms, and the V2 answers must hash as before the kill."""

import os
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from gameday.contract.backend import FaultRequest
from gameday.engine.session import current, deactivate
from gameday.node.host.process import HostSignalFault
from tests.verifiers.verifier_helpers import free_port, new_session, record_fault
from verifiers.prediction_hash import matches_golden
from verifiers.rto import measure_recovery
from verifiers.sli import recorder_for

REPO = Path(__file__).resolve().parents[2]
SERVER = Path(__file__).with_name("kserve_model.py")
PYTHON = Path(os.environ.get("GAMEDAY_KSERVE_PYTHON", REPO / ".venv-kserve" / "bin" / "python"))
pytestmark = pytest.mark.skipif(not PYTHON.exists(), reason=f"no KServe environment at "
                                f"{PYTHON} (make setup builds .venv-kserve)")
V2 = {"request": {"inputs": [{"name": "input-0", "shape": "$shape", "datatype": "FP32",
                              "data": "$inputs_flat"}]},
      "outputs": "outputs.0.data", "outputs_shape": "outputs.0.shape", "dtype": "float32"}


class Supervisor:
    """Runs a model server and starts it again whenever it dies (as systemd would): by
    default KServe's, on ``port``; else the command ``argv`` (which serves on ``port``)
    in the directory ``cwd``."""

    def __init__(self, root: Path, argv: list[str] | None = None, *, port: int = 0,
                 cwd: Path | None = None) -> None:
        self.port, self.grpc_port = port or free_port(), free_port()
        self.argv = argv or [str(PYTHON), str(SERVER), "--port", str(self.port),
                             "--grpc-port", str(self.grpc_port), "--load-s", "1.0"]
        self.cwd = cwd
        self.log = (root / "server.log").open("a")
        self.starts: list[float] = []
        self.process = self._start()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _start(self) -> subprocess.Popen[bytes]:
        self.starts.append(time.time())
        return subprocess.Popen(self.argv, stdout=self.log, stderr=subprocess.STDOUT,
                                cwd=self.cwd)

    def _watch(self) -> None:
        while not self._stop.wait(0.05):
            if self.process.poll() is not None:
                self.process = self._start()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.process.terminate()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.log.close()


class Prober:
    """Samples a URL every 5 ms: (request start, answered 200)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.samples: list[tuple[float, bool]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        session = requests.Session()
        while not self._stop.wait(0.005):
            started = time.time()
            try:
                ok = session.get(self.url, timeout=0.5).status_code == 200
            except requests.RequestException:
                ok = False
            self.samples.append((started, ok))

    def recovered_after(self, onset: float) -> float:
        failed = False
        for t, ok in self.samples:
            if t < onset:
                continue
            if not ok:
                failed = True
            elif failed:
                return t
        raise AssertionError("the prober never saw the server go and come back")

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Supervisor]:
    supervisor = Supervisor(tmp_path)
    url = f"http://127.0.0.1:{supervisor.port}/v2/models/linear/ready"
    deadline = time.monotonic() + 60
    while True:
        try:
            if requests.get(url, timeout=1).status_code == 200:
                break
        except requests.RequestException:
            pass
        assert time.monotonic() < deadline, (tmp_path / "server.log").read_text()[-2000:]
        time.sleep(0.1)
    yield supervisor
    supervisor.close()
    deactivate()


def test_kill_rto_against_a_dense_prober_and_answers_bit_identical(server: Supervisor) -> None:
    base = f"http://127.0.0.1:{server.port}/v2/models/linear"
    session = new_session()
    assert matches_golden(f"{base}/infer", **V2)  # captures the golden answers
    session.recorder = recorder_for({"http": f"{base}/ready", "interval_s": 0.1},
                                    session.clock)
    session.recorder.start()
    prober = Prober(f"{base}/ready")
    try:
        time.sleep(1.0)
        killed = HostSignalFault("process.kill").apply("k-1", FaultRequest(
            "process.kill", {"cmdline": f"kserve_model.py --port {server.port} "}))
        record_fault(session, kind="process.kill")
        assert killed["processes"][0]["pid"] != 0
        result = measure_recovery(stable_for_s=1.0, expect_outage=True, timeout_s=60,
                                  detect={})
        truth = prober.recovered_after(result["onset"]) - result["onset"]
    finally:
        prober.close()
        current().recorder.stop()  # type: ignore[union-attr]
    assert len(server.starts) == 2  # the supervisor restarted it once
    # the claim under test: the recovery lies within rto ± resolution (plus the
    # prober's own 5 ms cadence and a request's latency on this shared machine)
    assert abs(result["rto_s"] - truth) <= result["rto_resolution_s"] + 0.15, (result, truth)
    assert matches_golden(f"{base}/infer", **V2)  # the same answers, bit for bit
