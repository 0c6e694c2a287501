"""Typed client errors raised while translating JSON into commands."""

from __future__ import annotations


class ClientError(Exception):
    """Refuse one client event; nothing about the session changes.

    Fields follow the Realtime error envelope: `type`, `code`, `message`,
    `param` (the offending field) and the client's `event_id`.
    """

    def __init__(
        self,
        code: str,
        message: str,
        *,
        param: str = "",
        type_: str = "invalid_request_error",
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.param = param
        self.type = type_


def not_unicode() -> ClientError:
    # JSON may escape a lone UTF-16 surrogate ("\\ud800"); no protobuf string holds one.
    return ClientError("invalid_value", "strings must be valid Unicode (no lone UTF-16 surrogates)")
