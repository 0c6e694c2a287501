"""Stage1 Prometheus metrics."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Gauge, Histogram

from antiphon.common.loop_lag import lag_histogram
from antiphon.common.metrics import LATENCY_BUCKETS


class Stage1Metrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.loop_lag = lag_histogram("stage1", registry)
        self.sessions_active = Gauge(
            "antiphon_stage1_sessions_active", "Sessions bound to this worker", registry=registry
        )
        self.capacity = Gauge(
            "antiphon_stage1_capacity",
            "Sessions this worker serves in real time (configured)",
            registry=registry,
        )
        self.first_audio = Histogram(
            "antiphon_stage1_first_audio_seconds",
            "From a response's first text to its first audio",
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.rtf = Histogram(
            "antiphon_stage1_real_time_factor",
            "Synthesis time divided by audio duration, per clause",
            buckets=(0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1, 1.5, 2),
            registry=registry,
        )
        self.queue_depth = Gauge(
            "antiphon_stage1_queue_depth",
            "Clauses waiting for the voice thread, across sessions",
            registry=registry,
        )
