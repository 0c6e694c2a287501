"""Gateway configuration."""

from __future__ import annotations

from typing import ClassVar

from antiphon.common.config import ServiceSettings


class GatewaySettings(ServiceSettings):
    profile_section: ClassVar[str] = "gateway"

    host: str = "0.0.0.0"
    port: int = 8000
    session_address: str = "127.0.0.1:50051"
    # Empty = no auth; otherwise clients must send `Authorization: Bearer <key>`.
    api_key: str = ""
    # Largest WebSocket text frame accepted (a 200 ms append is ~13 KB).
    max_message_bytes: int = 4 * 1024 * 1024
    default_model: str = "antiphon-cascade"
