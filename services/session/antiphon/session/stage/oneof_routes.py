"""Handlers for the messages of one proto oneof, found by the message's type.

A stage worker's event is a oneof of message types. A table from each type
to its handler stands where a `match` on field names would (strings that a
typo slips through): `route` ties each handler to the type it takes, so
mypy checks every pair, and refuses a type that is no field of the oneof;
`unrouted` names the fields with no handler (a test holds it empty, so a
kind added to the proto fails until it is handled).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from google.protobuf.message import Message

M = TypeVar("M", bound=Message)


class Routes:
    def __init__(self, event: type[Message], oneof: str = "kind") -> None:
        self._oneof = event.DESCRIPTOR.oneofs_by_name[oneof]
        # Each field of the oneof, by the full name of the message it carries.
        self._fields = {
            f.message_type.full_name: f.name for f in self._oneof.fields if f.message_type
        }
        if len(self._fields) != len(self._oneof.fields):
            # Found by its type, each message must be the only field of that type.
            raise ValueError(f"{self._oneof.full_name}: two fields carry one type, or a scalar")
        self._handlers: dict[str, Callable[[Any], Awaitable[None]]] = {}

    def route(self, message: type[M], handler: Callable[[M], Awaitable[None]]) -> Routes:
        """`handler` takes the oneof's `message`s; ValueError if the oneof has none."""
        name = message.DESCRIPTOR.full_name
        if name not in self._fields:
            raise ValueError(f"{self._oneof.full_name} carries no {name}")
        self._handlers[name] = handler
        return self

    def unrouted(self) -> list[str]:
        """The oneof's fields whose message no handler takes."""
        routed = {self._fields[name] for name in self._handlers}
        return [f.name for f in self._oneof.fields if f.name not in routed]

    def message(self, event: Message) -> Message | None:
        """The message `event` carries in the oneof; None when it carries none."""
        for field, value in event.ListFields():
            if field.containing_oneof is self._oneof:
                assert isinstance(value, Message)
                return value
        return None

    async def dispatch(self, message: Message) -> None:
        await self._handlers[message.DESCRIPTOR.full_name](message)
