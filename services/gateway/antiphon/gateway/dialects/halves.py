"""A connection's two halves of its dialect, and what the connection lends them.

The inbound half (`Interpreter`) turns client events into typed commands;
the outbound half (`Projector`) turns the session's typed events into
frames. The Realtime dialects' halves know nothing of each other (the
`Translator` and a projector). GPT-Live's share one session's timeline,
which client audio advances and which releases output of its own: the
connection lends them `Lent` to send such frames and to end the session.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from antiphon.gateway.edge.pinned import PinnedConfig
from antiphon.gateway.errors import ClientError
from antiphon.v1 import common_pb2 as cpb
from antiphon.v1 import session_pb2 as spb

Json = dict[str, Any]

# A typed event as this dialect's frames: usually one; none where the dialect
# has no event for it; a frame held back may come out with a later event.
Projector = Callable[[spb.ServerEvent], list[Json]]


class Interpreter(Protocol):
    """Client events -> commands; each raises ClientError to refuse one."""

    def open(self, event: Json, query: dict[str, str]) -> spb.ClientCommand:
        """The command that opens (or resumes) the session, from the first event."""
        ...

    def connect(self, query: dict[str, str]) -> spb.ClientCommand:
        """The open of a dialect that opens as the socket is accepted."""
        ...

    def translate(self, event: Json) -> spb.ClientCommand | None:
        """The command of one event after the open; None: answered here."""
        ...

    def adopt(self, config: cpb.SessionConfig) -> None:
        """A resumed session's configuration (`session.resumed`)."""
        ...


@dataclass(frozen=True)
class Lent:
    """What a connection lends its dialect's halves."""

    # Send a frame of the dialect's own (no session event made it).
    say: Callable[[Json], None]
    # End the session and close the socket, telling the client this error.
    refuse: Callable[[ClientError], None]
    # A client secret's configuration, fixed at the open.
    pinned: PinnedConfig | None
    # The decoded audio one append may carry.
    max_append_bytes: int
