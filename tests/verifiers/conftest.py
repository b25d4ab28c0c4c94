"""Fixtures for the verifier tests: a fresh run session and real HTTP servers."""

import os
from collections.abc import Iterator

import pytest

from gameday.engine.session import Session, deactivate
from tests.verifiers.verifier_helpers import (
    PROMETHEUS,
    ModelServer,
    PlacementServer,
    PrometheusUnderTest,
    new_session,
    placement_document,
    shard,
)


@pytest.fixture
def session() -> Iterator[Session]:
    yield new_session()
    deactivate()


@pytest.fixture
def model() -> Iterator[ModelServer]:
    server = ModelServer()
    yield server
    server.close()


@pytest.fixture
def placement_server() -> Iterator[PlacementServer]:
    server = PlacementServer(placement_document([shard(0, "node-0", 0), shard(1, "node-1", 0)]))
    yield server
    server.close()


@pytest.fixture(scope="session")
def prometheus() -> Iterator[PrometheusUnderTest]:
    """One real Prometheus (1 s scrapes) of a test exporter, shared by the package."""
    if not os.path.exists(PROMETHEUS):
        pytest.skip(f"{PROMETHEUS} is not installed (apt-get install prometheus)")
    server = PrometheusUnderTest()
    try:
        server.wait_scraped()
        yield server
    finally:
        server.close()
