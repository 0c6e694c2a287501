"""Stage0 Prometheus metrics (reference measurement contract: engine clocks only)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from antiphon.common.loop_lag import lag_histogram
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
        self.vad_batch_size = Histogram(
            "antiphon_stage0_vad_batch_size",
            "Sessions' VAD frames run in one model call",
            buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256),
            registry=registry,
        )
        self.turn_batch_size = Histogram(
            "antiphon_stage0_turn_batch_size",
            "Sessions' windows run in one end-of-turn model call (semantic_vad)",
            buckets=(1, 2, 4, 8, 16, 32),
            registry=registry,
        )
        self.turn_ends = Counter(
            "antiphon_stage0_turn_ends_total",
            "semantic_vad turns ended, by what ended them",
            ["by"],
            registry=registry,
        )
        self.asr_latency = Histogram(
            "antiphon_stage0_asr_seconds",
            "From the end of an utterance to its transcript (only the tail is left by then)",
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.generations = Counter(
            "antiphon_stage0_generations_total",
            "Generations by finish reason",
            ["reason"],
            registry=registry,
        )
        self.queue_depth = Gauge(
            "antiphon_stage0_queue_depth",
            "Work waiting or running per stage0 queue (asr: transcriptions)",
            ["queue"],
            registry=registry,
        )
        self.generate_wait = Histogram(
            "antiphon_stage0_generate_wait_seconds",
            "From a Generate's arrival to its prompt handed to the engine"
            " (waiting on the event loop, and building the prompt)",
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.loop_lag = lag_histogram("stage0", registry)
        self.llm_batch_size = Gauge(
            "antiphon_stage0_llm_batch_size",
            "Generations the engine runs together now (vLLM continuous batching)",
            registry=registry,
        )
