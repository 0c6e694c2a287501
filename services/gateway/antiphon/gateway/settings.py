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
    # Empty = no auth; otherwise clients must send `Authorization: Bearer <key>`.
    api_key: str = ""
    # Largest WebSocket text frame accepted (a 200 ms append is ~13 KB).
    max_message_bytes: int = 4 * 1024 * 1024
