"""Gateway Prometheus metrics, on a registry it is handed."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge


class GatewayMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.connections_active = Gauge(
            "antiphon_gateway_connections_active", "Open WebSocket connections", registry=registry
        )
        self.events_in = Counter(
            "antiphon_gateway_events_in_total",
            "Client events received, by type",
            ["type"],
            registry=registry,
        )
        self.events_out = Counter(
            "antiphon_gateway_events_out_total",
            "Server events sent, by type",
            ["type"],
            registry=registry,
        )
        self.reconnects = Counter(
            "antiphon_gateway_session_reconnects_total",
            "Session streams resumed on a replica after the previous stream was lost",
            registry=registry,
        )
        self.client_closes = Counter(
            "antiphon_gateway_client_closes_total",
            "Client sockets that closed, by how: clean (1000/1001) or dropped",
            ["kind"],
            registry=registry,
        )
        self.client_errors = Counter(
            "antiphon_gateway_client_errors_total",
            "Client events refused, by code",
            ["code"],
            registry=registry,
        )
