"""Prometheus exposition for the gRPC services.

Each service builds its own `CollectorRegistry` and passes it to the objects
that record metrics, so two instances in one process never share counters.
"""

from __future__ import annotations

from prometheus_client import (
    CollectorRegistry,
    GCCollector,
    PlatformCollector,
    ProcessCollector,
    start_http_server,
)

# Latency buckets in seconds, fine enough to tell 50 ms from 200 ms.
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.35, 0.5, 0.75, 1, 2, 5, 10)


def serve(registry: CollectorRegistry, port: int, host: str = "0.0.0.0") -> None:
    """Expose `/metrics` on its own port (0 = disabled)."""
    if port:
        start_http_server(port, addr=host, registry=registry)


def service_registry() -> CollectorRegistry:
    """A fresh registry with the process, platform and GC collectors (CPU, RSS, fds)."""
    registry = CollectorRegistry()
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    return registry
