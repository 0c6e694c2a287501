"""Stage1 Prometheus metrics."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from antiphon.common.loop_lag import lag_histogram
from antiphon.common.metrics import LATENCY_BUCKETS


class Stage1Metrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.loop_lag = lag_histogram("stage1", registry)
        self.sessions_active = Gauge(
            "antiphon_stage1_sessions_active", "Sessions bound to this worker", registry=registry
        )
        self.outbox_overflows = Counter(
            "antiphon_stage1_outbox_overflows_total",
            "Bindings ended (RESOURCE_EXHAUSTED) because their session service read "
            "none of the results waiting for it, up to the outbox's limit",
            registry=registry,
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
        # The first audio's three parts, which add up to it: waiting for the
        # first clause's words (the LLM's pace), for the voice thread (other
        # sessions' clauses), and the voice itself (a batched voice's wait for
        # its batch, and the network).
        self.first_audio_words = Histogram(
            "antiphon_stage1_first_audio_words_seconds",
            "From a response's first text to its first clause being queued",
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.first_audio_queue = Histogram(
            "antiphon_stage1_first_audio_queue_seconds",
            "From a response's first clause being queued to the voice taking it up",
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.first_audio_voice = Histogram(
            "antiphon_stage1_first_audio_voice_seconds",
            "From the voice taking a response's first clause up to its audio",
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.early_cuts = Counter(
            "antiphon_stage1_early_cuts_total",
            "Words spoken before their clause ended because the listener was "
            "about to run out of audio (playout.py)",
            registry=registry,
        )
        self.rtf = Histogram(
            "antiphon_stage1_real_time_factor",
            "Synthesis time divided by audio duration, per clause",
            buckets=(0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1, 1.5, 2),
            registry=registry,
        )
        self.tts_batch_size = Histogram(
            "antiphon_stage1_tts_batch_size",
            "Sentences voiced in one batch (tts_engine torch)",
            buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256),
            registry=registry,
        )
        self.tts_batch_wait = Histogram(
            "antiphon_stage1_tts_batch_wait_seconds",
            "From a sentence reaching the voice to its batch starting (tts_engine torch)",
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.tts_batch_run = Histogram(
            "antiphon_stage1_tts_batch_run_seconds",
            "One batch on the device, its audio back on the host (tts_engine torch)",
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.tts_graph_batches = Counter(
            "antiphon_stage1_tts_graph_batches_total",
            "Batches voiced with tts_cuda_graphs, by how they ran: graphs (recorded "
            "CUDA graphs replayed) or nodes (node by node: sentences past the "
            "recorded buckets)",
            ["run"],
            registry=registry,
        )
        self.queue_depth = Gauge(
            "antiphon_stage1_queue_depth",
            "Clauses waiting for the voice thread, across sessions",
            registry=registry,
        )


# One decode step must stay well inside the 80 ms frame: 5 ms steps up to
# the frame and beyond, then coarse ones for a worker that has fallen behind.
STEP_BUCKETS = (*(ms / 1000 for ms in range(5, 101, 5)), 0.12, 0.15, 0.2, 0.3, 0.5, 1.0)


class DuplexMetrics:
    """A frame backend's (`mimi`, `nemotron`) lockstep batch; registered only by
    a worker that runs one, so a Piper worker exports none of them. With `duplex_front_ends` the
    stepper exports the step, each front end its frames and its rows."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.step_seconds = Histogram(
            "antiphon_stage1_duplex_step_seconds",
            "One batched decode step of the duplex decoder (all rows with a frame)",
            buckets=STEP_BUCKETS,
            registry=registry,
        )
        self.rows_active = Gauge(
            "antiphon_stage1_duplex_rows_active",
            "Rows of the duplex decoder batch held by a session",
            registry=registry,
        )
        self.frames = Counter(
            "antiphon_stage1_duplex_frames",
            "Frames; sent: audio (a response's, decoded and sent), silent (decoded, not "
            "sent), dropped (not decoded: the session's queue was full) or lost (decoded, "
            "its audio written over before a duplex front end read it); with "
            "duplex_front_ends, counted by each front end",
            ["sent"],
            registry=registry,
        )
