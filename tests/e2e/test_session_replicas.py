"""Session replicas behind one gateway (LocalStack's `session_replicas`): the
gateway's round-robin channel spreads sessions over every replica, as a
Kubernetes headless Service spreads them over the session pods; each session
is served whole by the replica it landed on."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from stack import LocalStack, Ports

from antiphon.client.load import SERVER_VAD, LoadSession
from bench.lib.prometheus import scrape
from tests.support.redis_dbs import db_url
from tests.support.stacks import started

pytestmark = pytest.mark.stack
DB = 20  # this module's own database on the shared test Redis
SESSIONS = 6


@pytest.fixture(scope="module")
def two_replicas(request: pytest.FixtureRequest, redis_url: str) -> Iterator[LocalStack]:
    stack = LocalStack(
        ports=Ports.free(),
        redis_url=db_url(redis_url, DB),
        extra_env={
            "ANTIPHON_BACKEND": "synthetic",
            "ANTIPHON_CAPACITY": "16",
            "ANTIPHON_MAX_SESSIONS": "16",
        },
        session_replicas=2,
    )
    with started(request, stack) as s:
        yield s


def active(port: int) -> float:
    return scrape([port]).get("antiphon_session_sessions_active", 0.0)


async def test_the_gateway_spreads_sessions_over_every_replica(two_replicas: LocalStack) -> None:
    assert two_replicas.session_target().startswith("ipv4:")
    url = f"ws://127.0.0.1:{two_replicas.ports.gateway}/v1/realtime?duplex=1"
    sessions = [await LoadSession.open(k, url, SERVER_VAD, 30) for k in range(SESSIONS)]
    try:
        per_replica = [active(port) for port in two_replicas.session_metrics_ports]
    finally:
        for session in sessions:
            await session.close()
    assert sum(per_replica) == SESSIONS
    # Round robin: neither replica is left out (a pinned channel would give one all six).
    assert all(count >= 1 for count in per_replica), per_replica
