"""What a client call raises. Every error derives from `ClientError`."""

from __future__ import annotations

from typing import Any


class ClientError(Exception):
    """Anything that went wrong on the client's side of a session."""


class ServerUnreachable(ClientError):
    """No WebSocket could be opened: nothing listens there, or the name does not resolve."""

    def __init__(self, url: str, cause: BaseException) -> None:
        super().__init__(f"cannot reach {url}: {cause}")
        self.url = url


class Refused(ClientError):
    """The server refused the connection or the session: an HTTP status on the
    upgrade (401 for a missing, wrong or expired key) or an `error` event
    before the session opened (`rate_limit_error` when it is full)."""

    def __init__(self, message: str, *, status: int | None = None, code: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.code = code


class ProtocolError(ClientError):
    """An `error` event answering something this client sent."""

    def __init__(self, raw: dict[str, Any]) -> None:
        error = raw.get("error") or {}
        self.code: str = error.get("code") or ""
        self.kind: str = error.get("type") or ""
        self.param: str | None = error.get("param")
        self.raw = raw
        super().__init__(f"{self.code or self.kind}: {error.get('message', '')}")


class SessionClosed(ClientError):
    """The session ended (closed, expired, replaced) or its connection was lost
    for good while a call waited on it."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
