"""A stage binding that keeps what it was sent, for the session's parts alone."""

from __future__ import annotations

from typing import Any


class Recording:
    def __init__(self, address: str) -> None:
        self.address = address
        self.sent: list[Any] = []
        self.closed = False

    def send(self, request: Any) -> None:
        self.sent.append(request)

    async def close(self) -> None:
        self.closed = True
