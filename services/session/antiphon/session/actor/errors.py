"""What the client is told when the session will not do what it asked.

Parts of the session raise `Rejection` before they change anything; the
actor turns it into one `error` event naming the command that caused it.
The same exception refuses a handshake (open or resume), where the service
answers with an unjournaled error instead.
"""

from __future__ import annotations

from antiphon.session.conversation.conversation import ItemNotFound
from antiphon.session.stage.stages import BindError
from antiphon.v1 import session_pb2 as spb


class Rejection(Exception):
    def __init__(
        self, type_: str, code: str, message: str, param: str = "", client_type: str = ""
    ) -> None:
        super().__init__(message)
        self.type = type_
        self.code = code
        self.message = message
        self.param = param
        # The client event type the error names, where the dialect needs it.
        self.client_type = client_type

    def event(self, event_id: str = "") -> spb.ErrorEvent:
        return spb.ErrorEvent(
            type=self.type,
            code=self.code,
            message=self.message,
            param=self.param,
            event_id=event_id,
            client_type=self.client_type,
        )

    @classmethod
    def unbound(cls, exc: BindError) -> Rejection:
        """No stage worker took the session (on open, takeover or resume)."""
        return cls(exc.error_type, exc.code, str(exc))

    @classmethod
    def item_not_found(cls, exc: ItemNotFound, param: str, client_type: str) -> Rejection:
        return cls(
            "invalid_request_error",
            "item_not_found",
            f"Item with item_id '{exc.item_id}' not found in the conversation.",
            param,
            client_type,
        )


def invalid(code: str, message: str, param: str = "") -> Rejection:
    return Rejection("invalid_request_error", code, message, param)


def unsupported(client_type: str, capability: str, implementation: str) -> Rejection:
    return invalid(
        "unsupported_capability",
        f"{client_type or 'this event'} needs {capability}, "
        f"which the bound backend ({implementation}) lacks",
        "type",
    )


def resume_refused() -> Rejection:
    return invalid(
        "session_resume_refused",
        "resume token or incarnation does not match the session",
        "resume_token",
    )
