"""Where one WebSocket connection is in its life, and the only ways it moves on.

A connection opens (waits for the command that opens its session), serves
(events to the client, commands to the session), and ends one of three
ways: its client's socket closes (`CLIENT_GONE`: the session is told how),
the gateway closes it (`LEAVING`: a client at fault, or a drain), or the
session is over for it (straight to `CLOSING`). Every path then closes:
the last frames are written, the close frame sent, and it is `CLOSED`.

Whether the session stream is up or being resumed on another replica is
the fail-over part's (`failover`), not a state of the socket: a connection
whose client left may still be failing over to deliver its goodbye.

A move not in `TRANSITIONS` is a bug of the gateway, so it raises.
"""

from __future__ import annotations

import enum


class State(enum.Enum):
    OPENING = "opening"
    SERVING = "serving"
    CLIENT_GONE = "client_gone"
    LEAVING = "leaving"
    CLOSING = "closing"
    CLOSED = "closed"


TRANSITIONS: dict[State, frozenset[State]] = {
    # Gone before a session opened (or the URL could not open one) closes at once.
    State.OPENING: frozenset({State.SERVING, State.LEAVING, State.CLOSING}),
    # Straight to CLOSING: the session is over for this socket, or unavailable.
    State.SERVING: frozenset({State.CLIENT_GONE, State.LEAVING, State.CLOSING}),
    State.CLIENT_GONE: frozenset({State.CLOSING}),
    State.LEAVING: frozenset({State.CLOSING}),
    State.CLOSING: frozenset({State.CLOSED}),
    State.CLOSED: frozenset(),
}


class IllegalTransition(RuntimeError):
    """A connection was moved where its life does not go: a bug, not a client's fault."""


class ConnectionState:
    """The one writer of a connection's state."""

    def __init__(self) -> None:
        self._state = State.OPENING

    @property
    def state(self) -> State:
        return self._state

    def to(self, new: State) -> None:
        if new not in TRANSITIONS[self._state]:
            raise IllegalTransition(f"{self._state.value} -> {new.value}")
        self._state = new
