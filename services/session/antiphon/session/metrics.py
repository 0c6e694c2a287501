"""The session service's Prometheus metrics, on a registry it is handed."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from antiphon.common.loop_lag import lag_histogram
from antiphon.common.metrics import LATENCY_BUCKETS


class SessionMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.loop_lag = lag_histogram("session", registry)
        self.sessions_active = Gauge(
            "antiphon_session_sessions_active", "Sessions owned by this replica", registry=registry
        )
        self.sessions_admitted = Counter(
            "antiphon_session_sessions_admitted_total", "Sessions admitted", registry=registry
        )
        self.sessions_refused = Counter(
            "antiphon_session_sessions_refused_total",
            "Sessions refused, by reason",
            ["reason"],
            registry=registry,
        )
        self.commands = Counter(
            "antiphon_session_commands_total",
            "Client commands by kind",
            ["kind"],
            registry=registry,
        )
        self.events = Counter(
            "antiphon_session_events_total",
            "Server events journaled, by kind",
            ["kind"],
            registry=registry,
        )
        self.errors = Counter(
            "antiphon_session_errors_total", "Error events by code", ["code"], registry=registry
        )
        self.responses = Counter(
            "antiphon_session_responses_total",
            "Responses ended, by status",
            ["status"],
            registry=registry,
        )
        self.stale_dropped = Counter(
            "antiphon_session_stale_dropped_total",
            "Stage results dropped because their epoch or response is no longer current",
            ["source"],
            registry=registry,
        )
        self.resumes = Counter(
            "antiphon_session_resumes_total", "Sessions resumed on a new stream", registry=registry
        )
        self.takeovers = Counter(
            "antiphon_session_takeovers_total",
            "Takeovers: an attachment replaced, or a session taken from another replica",
            ["kind"],
            registry=registry,
        )
        self.expired = Counter(
            "antiphon_session_expired_total",
            "Sessions expired, by reason",
            ["reason"],
            registry=registry,
        )
        self.closed = Counter(
            "antiphon_session_closed_total",
            "Sessions ended by their client: session.close, or a clean socket close",
            ["reason"],
            registry=registry,
        )
        self.backlog_overflows = Counter(
            "antiphon_session_backlog_overflows_total",
            "Streams ended because their peer did not take what was queued for it, by queue",
            ["queue"],
            registry=registry,
        )
        self.detached = Counter(
            "antiphon_session_detached_total",
            "Sessions left resumable with no stream (and no stage slot), by how",
            ["how"],
            registry=registry,
        )
        self.duplicates = Counter(
            "antiphon_session_duplicate_operations_total",
            "Retried appends recognised by operation_id and not applied again",
            registry=registry,
        )
        self.append_latency = Histogram(
            "antiphon_session_append_seconds",
            "A client audio append from the mailbox until forwarded to stage0",
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.preemptive_answers = Counter(
            "antiphon_session_preemptive_answers_total",
            "Answers asked for at the user's first pause, before the turn ended "
            "(preemption.py), by outcome: started; used (a response took it over); "
            "why one was dropped (speech_resumed, speech_started, mismatch, "
            "cancelled, input_cleared, replaced, worker_lost, worker_changed, "
            "failed, overflow, closed); or not_wanted (a pause while a reply or "
            "a turn was under way, or in a session that does not answer by itself)",
            ["outcome"],
            registry=registry,
        )
        self.stage_failovers = Counter(
            "antiphon_session_stage_failovers_total",
            "Sessions moved to another stage worker after theirs died",
            ["stage"],
            registry=registry,
        )
        self.journal_latency = Histogram(
            "antiphon_session_journal_append_seconds",
            "Time to journal one mailbox drain's events and snapshot (one round trip)",
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.journal_batch = Histogram(
            "antiphon_session_journal_batch_events",
            "Events journaled in one round trip (one mailbox drain)",
            buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256),
            registry=registry,
        )
        self.store_unavailable = Counter(
            "antiphon_session_store_unavailable_total",
            "Sessions ended here because Redis did not answer within store_outage_max_s "
            "(their client gets session.resync_required, reason session_store_unavailable)",
            registry=registry,
        )
        self.stage_results_waited = Counter(
            "antiphon_session_stage_results_waited_total",
            "Stage results that waited for room in their session's mailbox "
            "(the stream is not read meanwhile, so the worker's outbox holds them)",
            ["stage"],
            registry=registry,
        )
