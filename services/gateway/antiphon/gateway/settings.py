"""Gateway configuration."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from antiphon.common.config import ServiceSettings


class GatewaySettings(ServiceSettings):
    profile_section: ClassVar[str] = "gateway"

    host: str = "0.0.0.0"
    port: int = 8000
    session_address: str = "127.0.0.1:50051"
    # Further session replicas to fail over to (the first is session_address).
    session_fallback_addresses: list[str] = Field(default_factory=list)
    # How long a connection keeps trying to resume its session on a live
    # replica after its stream to the session service was lost.
    reconnect_timeout_s: float = 15.0
    # One API key (more in `api_keys_file`); with none at all there is no
    # auth. Clients send `Authorization: Bearer <key>` (docs/security.md).
    api_key: str = ""
    # More API keys: a file of one key a line (`#` comments; `sha256:<hex>`
    # for a key given by its hash), e.g. a mounted Kubernetes Secret. Read at
    # start; any key configured turns authentication on.
    api_keys_file: str = ""
    # Signs client secrets (`POST /v1/realtime/client_secrets`). Empty = a
    # random key per process: a secret then works only on the replica that
    # minted it, so several replicas need one configured.
    client_secret_signing_key: str = ""
    # Per API key and per gateway process (a client secret counts against the
    # key that minted it); 0 = no limit. `key_opens_burst` 0 = one second's worth.
    key_max_sessions: int = Field(default=0, ge=0)
    key_opens_per_s: float = Field(default=0.0, ge=0.0)
    key_opens_burst: int = Field(default=0, ge=0)
    # Browser Origins allowed to open sockets and mint secrets, exactly as
    # browsers send them (`https://app.example.com`); empty = any. A request
    # without an Origin header (not a browser) is not checked.
    allowed_origins: list[str] = Field(default_factory=list)
    # Off unless set: `GET /demo/session` gives anyone who can reach the
    # gateway a client secret of this key (one more API key), for the demo page.
    demo_api_key: str = ""
    demo_secret_ttl_s: int = Field(default=60, ge=10, le=7200)
    # Largest audio one `input_audio_buffer.append` may carry, decoded
    # (OpenAI's limit: 15 MiB); a larger one is refused with `audio_too_large`.
    max_append_bytes: int = 15 * 1024 * 1024
    # Largest WebSocket text frame accepted: a 15 MiB append in base64 (20 MiB)
    # and its JSON envelope. A 200 ms append is ~13 KB.
    max_message_bytes: int = 20 * 1024 * 1024 + 64 * 1024
    # A socket that sends no client event at all this long after it opened is
    # closed (`first_event_timeout`). Any event counts, not only
    # `session.update`: OpenAI's dialect opens the session on accept, and a
    # client content with the defaults may start with an append.
    first_event_timeout_s: float = 10.0
    # Server events one socket may have waiting for its client to read them;
    # past this the reader is too slow for its own audio: `slow_consumer`,
    # and the socket is closed (a good reader never comes near it: ~2 min of
    # 24 kHz audio).
    max_outbox_bytes: int = 8 * 1024 * 1024
    # Client commands one socket may have waiting for its session stream;
    # past this the gateway stops reading the socket, so TCP slows the client.
    max_pending_commands: int = 256
    # The WebRTC edge (`POST /v1/realtime/calls`, calls.py). Off: no call
    # routes, and aiortc is never imported (a gateway for sockets only).
    webrtc_calls: bool = True
    # WebRTC calls (`POST /v1/realtime/calls`, calls.py) this gateway holds at
    # once; past it a call is refused with 429 `call_limit`. A call's Opus,
    # SRTP and pacing cost this one process about 5% of a core at 5-10 calls
    # (4.7-5.0%, typed audio; a socket's session 0.5%), so 16 calls fit in
    # ~80% of its one core, leaving the rest for bursts and the event loop's
    # lag (docs/performance.md, "WebRTC calls", measured on a 2-core EPYC).
    # More calls: more gateways.
    max_calls: int = Field(default=16, ge=0)
    # A call whose caller's audio stopped this long is ended (`media_timeout`):
    # a browser sends audio all the time, silence included.
    call_media_timeout_s: float = Field(default=30.0, gt=0)
    # STUN/TURN servers offered to calls' ICE (`stun:host:port`,
    # `turn:host:port`); none: host candidates only, enough where the
    # gateway's address is reachable by its callers.
    webrtc_ice_servers: list[str] = Field(default_factory=list)
