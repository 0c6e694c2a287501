"""Stage0 Prometheus metrics (reference measurement contract: engine clocks only)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from antiphon.common.metrics import LATENCY_BUCKETS


class Stage0Metrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.sessions_active = Gauge(
            "antiphon_stage0_sessions_active", "Sessions bound to this worker", registry=registry
        )
        self.ttft = Histogram(
            "antiphon_stage0_ttft_seconds",
            "LLM time to first token",
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.capacity = Gauge(
            "antiphon_stage0_capacity",
            "Sessions this worker serves in real time (configured)",
            registry=registry,
        )
        self.itl = Histogram(
            "antiphon_stage0_itl_seconds",
            "LLM inter-token latency, per token",
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.tpot = Histogram(
            "antiphon_stage0_tpot_seconds",
            "LLM time per output token",
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.asr_latency = Histogram(
            "antiphon_stage0_asr_seconds",
            "Whisper time per utterance",
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.generations = Counter(
            "antiphon_stage0_generations_total",
            "Generations by finish reason",
            ["reason"],
            registry=registry,
        )
