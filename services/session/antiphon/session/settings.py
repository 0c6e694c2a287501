"""Session service configuration, including the server-owned session limits.

The limits mirror the reference's `DuplexSessionRuntimeConfig`: they come
from the deploy profile and environment only, never from a client payload.
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from antiphon.common.config import ServiceSettings


class SessionSettings(ServiceSettings):
    profile_section: ClassVar[str] = "session"

    listen: str = "0.0.0.0:50051"
    metrics_port: int = 9101
    redis_url: str = "redis://127.0.0.1:6379/0"
    # Connections to Redis per replica; more callers wait for one.
    redis_max_connections: int = 64
    stage0_addresses: list[str] = Field(default_factory=lambda: ["127.0.0.1:50061"])
    stage1_addresses: list[str] = Field(default_factory=lambda: ["127.0.0.1:50071"])
    # Stage0 workers with an LLM (the cascade's) that answer GPT-Live's
    # Responses delegations for model-native sessions (docs/gpt-live.md);
    # empty: a delegated `response.create` is refused (`delegate_unavailable`).
    delegate_addresses: list[str] = Field(default_factory=list)
    # A session's owner lease: another replica may take an owner's sessions
    # over once it has not renewed for this long (renewed every third of it).
    owner_lease_s: float = 6.0
    # Seconds between readiness probes of Redis and the stage workers.
    readiness_interval_s: float = 1.0

    # Server-owned limits (reference `DuplexSessionRuntimeConfig`).
    max_sessions: int = 4
    idle_ttl_s: float = 300.0
    # A session ends with `session_expired` (`max_duration_expired`) this long
    # after it opened, attached or not, whichever replica owns it then
    # (OpenAI: 60 minutes). 0: no limit.
    max_session_duration_s: float = 3600.0
    disconnect_grace_s: float = 30.0
    reaper_interval_s: float = 5.0
    resume_replay_ttl_s: float = 60.0
    resume_replay_max_bytes_per_session: int = 8 * 1024 * 1024
    max_pending_input_bytes_per_session: int = 16 * 1024 * 1024
    max_pending_turns_per_session: int = 4
    completed_append_cache_size: int = 256
    # Events one attached stream may have waiting for its gateway; past this
    # the stream is ended (the session detaches: its journal has the events,
    # and the gateway's resume replays them), so a stuck gateway costs
    # bounded memory.
    max_outbound_events: int = 4096
    # Client commands one session may have waiting in its mailbox; the stream
    # is not read meanwhile, so gRPC's flow control slows the gateway.
    max_pending_commands: int = 256
    # Results one stage may have waiting in a session's mailbox; past it the
    # binding's stream is not read, and the worker's bounded outbox holds
    # (merges, or at its own limit ends the stream: the session rebinds).
    max_pending_stage_results: int = 256
    # How long a session's owner waits out a Redis that does not answer (a
    # paused or restarting Redis, a Sentinel fail-over), holding its events
    # unsent and its client attached. Past it the session is given up here:
    # its client gets `session.resync_required` (`session_store_unavailable`).
    store_outage_max_s: float = 60.0
    # The events one mailbox drain makes go to the journal in one pipelined
    # round trip, with the snapshot. Off: one round trip per event (the way
    # before; for comparison, bench.journal).
    journal_batching: bool = True
    # A commit over an active auto-response shorter than this is a listener's
    # acknowledgement ("mm-hm"), not a new turn.
    short_overlap_ms: int = 600
    # Answer at the user's first pause, held until the turn ends (VAD and
    # native lanes; preemption.py): first audio then costs the turn
    # detector's wait and little more. Off: the answer starts at the turn's end.
    preemptive_answers: bool = True
    # Server default and ceiling for response length in tokens.
    max_output_tokens: int = 256
