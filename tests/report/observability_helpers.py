"""Real Alertmanager, Pushgateway and Prometheus servers (Debian's packages) for tests: each
on a free loopback port with a temporary data directory, stopped by ``close``."""

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from tests.verifiers.verifier_helpers import free_port


class Daemon:
    """One server process in its own session, with its log kept for failures."""

    def __init__(self, name: str, argv: list[str], port: int, ready_path: str) -> None:
        binary = shutil.which(argv[0]) or f"/usr/bin/{argv[0]}"
        self.dir = Path(tempfile.mkdtemp(prefix=f"gameday-{name}-"))
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self._log = open(self.dir / "log", "w")  # noqa: SIM115 (closed in close)
        self.process = subprocess.Popen([binary, *argv[1:]], stdout=subprocess.DEVNULL,
                                        stderr=self._log, start_new_session=True,
                                        cwd=self.dir)
        deadline = time.monotonic() + 60
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"{name} exited {self.process.returncode}: "
                                   f"{(self.dir / 'log').read_text()[-800:]}")
            try:
                with urllib.request.urlopen(self.url + ready_path, timeout=2) as answer:
                    if answer.status == 200:
                        return
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.close()
                raise RuntimeError(f"{name} did not become ready")
            time.sleep(0.2)

    def close(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=10)
        self._log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def alertmanager() -> Daemon:
    """An Alertmanager that routes every alert to a receiver that sends nothing."""
    port = free_port()
    directory = Path(tempfile.mkdtemp(prefix="gameday-am-config-"))
    config = directory / "alertmanager.yml"
    config.write_text("route: {receiver: 'null'}\nreceivers: [{name: 'null'}]\n")
    return Daemon("alertmanager", [
        "prometheus-alertmanager", f"--config.file={config}",
        f"--storage.path={directory / 'data'}", f"--web.listen-address=127.0.0.1:{port}",
        "--cluster.listen-address="], port, "/-/ready")


def pushgateway() -> Daemon:
    port = free_port()
    return Daemon("pushgateway", ["prometheus-pushgateway",
                                  f"--web.listen-address=127.0.0.1:{port}"], port, "/-/ready")


def prometheus(jobs: dict[str, list[str]], *, honor_labels: tuple[str, ...] = ()) -> Daemon:
    """A Prometheus scraping each job's targets every second."""
    port = free_port()
    directory = Path(tempfile.mkdtemp(prefix="gameday-prom-config-"))
    scrape = [{"job_name": job, "scrape_interval": "1s", "honor_labels": job in honor_labels,
               "static_configs": [{"targets": targets}]} for job, targets in jobs.items()]
    config = directory / "prometheus.yml"
    config.write_text(json.dumps({"global": {"scrape_interval": "1s"},
                                  "scrape_configs": scrape}))
    return Daemon("prometheus", [
        "prometheus", f"--config.file={config}", f"--storage.tsdb.path={directory / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"], port, "/-/ready")


def query(prom: Daemon, promql: str, **extra: str) -> list[Any]:
    url = f"{prom.url}/api/v1/query?" + urllib.parse.urlencode({"query": promql, **extra})
    with urllib.request.urlopen(url, timeout=5) as answer:
        result: list[Any] = json.loads(answer.read())["data"]["result"]
    return result


def silences(am: Daemon) -> list[dict[str, Any]]:
    with urllib.request.urlopen(am.url + "/api/v2/silences", timeout=5) as answer:
        found: list[dict[str, Any]] = json.loads(answer.read())
    return found


def hostport(url: str) -> str:
    return url.split("://", 1)[1].rstrip("/")
