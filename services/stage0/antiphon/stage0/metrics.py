"""Stage0 Prometheus metrics (reference measurement contract: engine clocks only)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from antiphon.common.loop_lag import lag_histogram
from antiphon.common.metrics import LATENCY_BUCKETS

# A duplex step must end within its 80 ms frame: 5 ms apart up to 100 ms to
# see how close it runs, then coarser to see how far past a late one ran.
DUPLEX_STEP_BUCKETS = (
    *(ms / 1000 for ms in range(5, 101, 5)),
    0.12,
    0.15,
    0.2,
    0.3,
    0.5,
    1.0,
)


class Stage0Metrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.sessions_active = Gauge(
            "antiphon_stage0_sessions_active", "Sessions bound to this worker", registry=registry
        )
        self.outbox_overflows = Counter(
            "antiphon_stage0_outbox_overflows_total",
            "Bindings ended (RESOURCE_EXHAUSTED) because their session service read "
            "none of the results waiting for it, up to the outbox's limit",
            registry=registry,
        )
        self.ttft = Histogram(
            "antiphon_stage0_ttft_seconds",
            "LLM time to first token",
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.llm_engine = Gauge(
            "antiphon_stage0_llm_engine_info",
            "The LLM engine and number format this worker runs (1), and the CPU "
            "instruction set they were chosen for (cpu_choice.py)",
            ["engine", "format", "cpu"],
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
        self.asr_batch_size = Histogram(
            "antiphon_stage0_asr_batch_size",
            "Utterances transcribed in one batch (asr_engine torch)",
            buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256),
            registry=registry,
        )
        self.asr_graph_batches = Counter(
            "antiphon_stage0_asr_graph_batches_total",
            "Batches transcribed with asr_cuda_graphs, by how their decode ran: graphs "
            "(recorded steps replayed) or ops (op by op: more rows or longer audio "
            "than the buffers recorded at load)",
            ["run"],
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
        self.pauses = Counter(
            "antiphon_stage0_utterance_pauses_total",
            "First pauses in an utterance transcribed for a preemptive answer: "
            "reported (the text went to the session), resumed (speech went on "
            "after a reported pause), ended (the turn ended in the pause: its "
            "transcript is the pause's, with no second ASR pass)",
            ["outcome"],
            registry=registry,
        )
        self.partial_transcripts = Counter(
            "antiphon_stage0_partial_transcripts_total",
            "Partial transcripts reported while the user spoke (each one grew "
            "the words two ASR passes in a row agreed on)",
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
        # The `moshi` backend's lockstep clock (backends/moshi/lockstep.py).
        self.duplex_step = Histogram(
            "antiphon_stage0_duplex_step_seconds",
            "One lockstep step of every row (Mimi encode and the LM), in its worker thread",
            buckets=DUPLEX_STEP_BUCKETS,
            registry=registry,
        )
        self.duplex_late_frames = Counter(
            "antiphon_stage0_duplex_late_frames_total",
            "Sessions' frames made by a step that ended after its deadline",
            registry=registry,
        )
        self.duplex_silence_frames = Counter(
            "antiphon_stage0_duplex_silence_frames_total",
            "Sessions' steps on silence: less than a frame of their audio had come",
            registry=registry,
        )
        self.duplex_dropped_input_ms = Counter(
            "antiphon_stage0_duplex_dropped_input_ms_total",
            "Input audio dropped, oldest first, from full jitter buffers",
            registry=registry,
        )
        self.duplex_rows_active = Gauge(
            "antiphon_stage0_duplex_rows_active",
            "Rows of the lockstep batch that serve a session now",
            registry=registry,
        )
        # The `minicpmo` backend: a unit closed (its second of audio in) to its answer.
        self.duplex_unit = Histogram(
            "antiphon_stage0_duplex_unit_seconds",
            "A one-second unit's wait and the model's answer to it, from its last audio",
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.duplex_context_restarts = Counter(
            "antiphon_stage0_duplex_context_restarts_total",
            "Sessions' requests started afresh from their system turn: the next unit "
            "would have taken the context past its length",
            registry=registry,
        )
        # A `moshi` front end's (duplex_front_ends): its stepper's metrics are
        # the ones above, at the pod's metrics port + the front ends' count.
        self.duplex_lost_frames = Counter(
            "antiphon_stage0_duplex_lost_frames_total",
            "Sessions' steps whose output a front end read too late: its stepper "
            "had written over them (shared_rows.DEPTH steps later)",
            registry=registry,
        )
