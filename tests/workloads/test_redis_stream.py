"""A real Redis (Debian's redis-server, on a free loopback port, started and stopped
here) with a real consumer group: the consumer process is killed holding entries it read
but never acknowledged, and ``rpo.stream_loss`` counts them, against the consumer's own
record of what it acknowledged."""

import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from chaoslib.exceptions import ActivityFailed

from gameday.engine.session import deactivate
from tests.verifiers.verifier_helpers import free_port, new_session, only_result, record_fault
from verifiers.rpo import stream_loss

SERVER = shutil.which("redis-server")
CONSUMER = Path(__file__).with_name("stream_consumer.py")
pytestmark = pytest.mark.skipif(SERVER is None, reason="needs Debian's redis-server "
                                                      "(make setup installs it)")


@pytest.fixture
def redis_url(tmp_path: Path) -> Iterator[str]:
    port = free_port()
    assert SERVER is not None
    server = subprocess.Popen([SERVER, "--port", str(port), "--bind", "127.0.0.1",
                               "--save", "", "--appendonly", "no", "--dir", str(tmp_path)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"redis://127.0.0.1:{port}/0"
    client = redis.Redis.from_url(url)
    deadline = time.monotonic() + 10
    while True:
        try:
            client.ping()
            break
        except redis.ConnectionError:
            assert time.monotonic() < deadline and server.poll() is None, "no redis-server"
            time.sleep(0.05)
    yield url
    server.terminate()
    server.wait(timeout=10)
    deactivate()


def test_a_crashed_consumer_loses_what_it_read_but_never_acknowledged(
        redis_url: str, tmp_path: Path) -> None:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    client.xgroup_create("orders", "billing", id="0", mkstream=True)
    before = {client.xadd("orders", {"n": number}) for number in range(200)}
    acked, acking = tmp_path / "acked.txt", tmp_path / "acking.txt"
    consumer = subprocess.Popen([sys.executable, str(CONSUMER), "--url", redis_url,
                                 "--stream", "orders", "--group", "billing",
                                 "--acked", str(acked), "--acking", str(acking)])
    try:
        deadline = time.monotonic() + 20
        while not acked.exists() or len(acked.read_text().split()) < 25:
            assert time.monotonic() < deadline, "the consumer acknowledged nothing"
            time.sleep(0.05)
        session = new_session()
        consumer.send_signal(signal.SIGKILL)  # mid-batch: read, not all acknowledged
        consumer.wait()
        record_fault(session, kind="process.kill")
        time.sleep(0.01)
        client.xadd("orders", {"n": "after the fault"})  # not counted
        with pytest.raises(ActivityFailed) as caught:
            stream_loss(redis={"url": redis_url, "stream": "orders", "group": "billing"},
                        slo_messages=0, settle_s=1.0, timeout_s=10, interval_s=0.2)
        done = set(acked.read_text().split())
        # killed between its XACK and its own record, the consumer leaves one id in doubt
        doubt = len(set(acking.read_text().split()) - done)
        result = only_result(session).measurement
        most = len(before - done)
        assert most - doubt <= result["lost"] <= most and result["accepted"] == 200
        truth = int(result["lost"])
        assert truth > 0 and (doubt or truth == most)
        assert result["pending"] + result["undelivered"] == truth
        assert str(caught.value).startswith(
            f"stream lost {truth} messages > slo 0 (missed by {truth}; orders/billing: 200 "
            f"added by the fault")
        deactivate()

        restarted = subprocess.Popen([sys.executable, str(CONSUMER), "--url", redis_url,
                                      "--stream", "orders", "--group", "billing",
                                      "--acked", str(acked), "--name", "second"])
        try:
            session = new_session()
            record_fault(session, kind="process.kill", applied_at=result["onset"])
            settled = stream_loss(redis={"url": redis_url, "stream": "orders",
                                         "group": "billing"},
                                  slo_messages=truth, settle_s=3.0, timeout_s=30,
                                  interval_s=0.2)
            # the new consumer takes what was never delivered; the pending stay lost (it
            # never claims them), by the consumers' own record
            pending = settled["pending"]
            assert settled["undelivered"] == 0 and settled["lost"] == pending
            most = len(before - set(acked.read_text().split()))
            assert most - doubt <= pending <= most and pending > 0
        finally:
            restarted.kill()
            restarted.wait()
    finally:
        if consumer.poll() is None:
            consumer.kill()
            consumer.wait()
