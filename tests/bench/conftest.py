"""`serve`: a real registry's /metrics over HTTP, shut down after the test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry, start_http_server

from bench.lib.machine import free_port
from tests.bench.serving import Serve


@pytest.fixture
def serve() -> Iterator[Serve]:
    """`serve(registry)` -> the port its /metrics is on; all shut down after the test."""
    servers = []

    def start(registry: CollectorRegistry) -> int:
        port = free_port()
        server, _thread = start_http_server(port, addr="127.0.0.1", registry=registry)
        servers.append(server)
        return port

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()
