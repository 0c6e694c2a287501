"""A connection's life: the ways it may go, and a wrong move raising at once."""

from __future__ import annotations

import pytest

from antiphon.gateway.connection.connection_state import (
    TRANSITIONS,
    ConnectionState,
    IllegalTransition,
    State,
)


def walk(*states: State) -> ConnectionState:
    s = ConnectionState()
    for state in states:
        s.to(state)
    return s


@pytest.mark.parametrize(
    "path",
    [
        # The client leaves (a goodbye or a drop) while its session is served.
        [State.SERVING, State.CLIENT_GONE, State.CLOSING, State.CLOSED],
        # The gateway closes it: a client at fault, or a drain.
        [State.SERVING, State.LEAVING, State.CLOSING, State.CLOSED],
        # Silent past its first-event window before it opened a session.
        [State.LEAVING, State.CLOSING, State.CLOSED],
        # The session is over for this socket (or no replica takes it back).
        [State.SERVING, State.CLOSING, State.CLOSED],
        # Gone before it opened a session, or its URL could not open one.
        [State.CLOSING, State.CLOSED],
    ],
)
def test_every_way_a_connection_ends_closes_it(path: list[State]) -> None:
    s = walk(*path)
    assert s.state is State.CLOSED


def test_a_connection_starts_opening() -> None:
    assert ConnectionState().state is State.OPENING


@pytest.mark.parametrize(
    ("before", "wrong"),
    [
        # A socket whose client left is never served again, nor left by the gateway.
        ([State.SERVING, State.CLIENT_GONE], State.SERVING),
        ([State.SERVING, State.CLIENT_GONE], State.LEAVING),
        # One leaving only: the gateway's own close is not a client's.
        ([State.SERVING, State.LEAVING], State.CLIENT_GONE),
        # Closing skips neither the last frames nor the close frame.
        ([], State.CLOSED),
        ([State.SERVING], State.CLOSED),
        # Closed is final; and a state is never entered twice in a row.
        ([State.CLOSING, State.CLOSED], State.OPENING),
        ([State.SERVING], State.SERVING),
        ([State.CLOSING], State.CLOSING),
    ],
)
def test_a_move_the_life_does_not_allow_raises_and_changes_nothing(
    before: list[State], wrong: State
) -> None:
    s = walk(*before)
    was = s.state
    with pytest.raises(IllegalTransition):
        s.to(wrong)
    assert s.state is was


def test_every_state_is_in_the_table_and_only_closed_is_final() -> None:
    assert set(TRANSITIONS) == set(State)
    assert [s for s, nxt in TRANSITIONS.items() if not nxt] == [State.CLOSED]
    assert all(State.OPENING not in nxt for nxt in TRANSITIONS.values())
