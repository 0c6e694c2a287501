"""Gateway Prometheus metrics, on a registry it is handed."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

from antiphon.common.loop_lag import lag_histogram


class GatewayMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.loop_lag = lag_histogram("gateway", registry)
        self.connections_active = Gauge(
            "antiphon_gateway_connections_active",
            "Open client connections (WebSockets and WebRTC calls)",
            registry=registry,
        )
        self.calls_active = Gauge(
            "antiphon_gateway_calls_active", "Open WebRTC calls", registry=registry
        )
        self.calls_ended = Counter(
            "antiphon_gateway_calls_ended_total",
            "WebRTC calls ended, by what ended them",
            ["why"],
            registry=registry,
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
        self.refusals = Counter(
            "antiphon_gateway_refusals_total",
            "WebSocket upgrades and client_secrets requests refused before any session, by reason",
            ["reason"],
            registry=registry,
        )
        self.client_secrets_minted = Counter(
            "antiphon_gateway_client_secrets_minted_total",
            "Client secrets minted, by endpoint (client_secrets, demo)",
            ["endpoint"],
            registry=registry,
        )
        self.server_closes = Counter(
            "antiphon_gateway_server_closes_total",
            "Client sockets the gateway closed on its own initiative, by reason",
            ["reason"],
            registry=registry,
        )
        self.outbox_bytes = Gauge(
            "antiphon_gateway_outbox_bytes",
            "Server events waiting for their clients to read them, all sockets",
            registry=registry,
        )
        self.outbox_peak = Gauge(
            "antiphon_gateway_outbox_peak_bytes",
            "The largest backlog one socket's outbox has held since the start",
            registry=registry,
        )
        self.draining = Gauge(
            "antiphon_gateway_draining",
            "1 once SIGTERM started the drain: not ready, no new sockets",
            registry=registry,
        )
        self._peak = 0

    def note_outbox(self, size: int) -> None:
        """One socket's backlog is `size` bytes now."""
        if size > self._peak:
            self._peak = size
            self.outbox_peak.set(size)
