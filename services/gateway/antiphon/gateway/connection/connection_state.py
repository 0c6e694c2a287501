"""Where one WebSocket connection is in its life, and the only ways it moves on.

A connection opens (waits for the command that opens its session), serves
(events to the client, commands to the session), and ends one of three
ways: its client's socket closes (`ClientGone`: the session is told how),
the gateway closes it (`Leaving`: a client at fault, or a drain), or the
session is over for it (straight to `Closing`). Every path then closes:
the last frames are written, the close frame sent, and it is `Closed`.

How the socket closes is decided once, by the move into `Closing`: the
state carries its close code and reason, and the outbox hands the same
object to the writer after the last frame. A `Leaving` closes with its own
code; the gateway's first reason to leave wins (a later one finds the
connection no longer open or serving).

Whether the session stream is up or being resumed on another replica is
the fail-over part's (`failover_state`), not a state of the socket: a
connection whose client left may still be failing over to deliver its goodbye.

A move not in `TRANSITIONS` is a bug of the gateway, so it raises.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from antiphon.gateway.connection.close_codes import CLOSE_NORMAL, CLOSE_SERVICE_RESTART
from antiphon.gateway.errors import ClientError


@dataclass(frozen=True)
class Opening:
    """Waiting for the command that opens the session."""


@dataclass(frozen=True)
class Serving:
    """Events to the client, commands to the session."""


@dataclass(frozen=True)
class ClientGone:
    """The client's socket closed; the session is told how (`client_close`)."""


@dataclass(frozen=True)
class Leaving:
    """The gateway closes this socket on its own: why (a metric label and the
    close reason), with which close code, the error told first (if any), and
    whether the session ends (a client at fault) or only detaches (a drain:
    the client resumes it elsewhere)."""

    reason: str
    close_code: int
    error: ClientError | None
    ends_session: bool


@dataclass(frozen=True)
class Closing:
    """The last frames go out, then the close frame with this code and reason."""

    code: int = CLOSE_NORMAL
    reason: str = ""


@dataclass(frozen=True)
class Closed:
    """Written out (or dropped past the flush deadline): nothing more happens."""


State = Opening | Serving | ClientGone | Leaving | Closing | Closed

DRAIN = Leaving("service_restart", CLOSE_SERVICE_RESTART, None, ends_session=False)

TRANSITIONS: dict[type[State], frozenset[type[State]]] = {
    # Gone before a session opened (or the URL could not open one) closes at once.
    Opening: frozenset({Serving, Leaving, Closing}),
    # Straight to Closing: the session is over for this socket, or unavailable.
    Serving: frozenset({ClientGone, Leaving, Closing}),
    ClientGone: frozenset({Closing}),
    Leaving: frozenset({Closing}),
    Closing: frozenset({Closed}),
    Closed: frozenset(),
}


class IllegalTransition(RuntimeError):
    """A connection was moved where its life does not go: a bug, not a client's fault."""


class ConnectionState:
    """The one writer of a connection's state."""

    def __init__(self) -> None:
        self._state: State = Opening()
        # Resolved by the move into Leaving: what the connection's serving
        # waits on, beside its socket and its session.
        self._left: asyncio.Future[Leaving] = asyncio.get_running_loop().create_future()

    @property
    def state(self) -> State:
        return self._state

    @property
    def left(self) -> asyncio.Future[Leaving]:
        """Done once the gateway decided to close this socket, with its reason."""
        return self._left

    def may(self, new: type[State]) -> bool:
        return new in TRANSITIONS[type(self._state)]

    def to(self, new: State) -> None:
        if not self.may(type(new)):
            raise IllegalTransition(f"{_name(self._state)} -> {_name(new)}")
        self._state = new
        if isinstance(new, Leaving):
            self._left.set_result(new)

    def closing(self) -> Closing:
        """The close this state leads to when nothing more particular decided it:
        a leaving's own code and reason, else a normal closure."""
        state = self._state
        if isinstance(state, Leaving):
            return Closing(state.close_code, state.reason)
        return Closing()


def _name(state: State) -> str:
    return type(state).__name__
