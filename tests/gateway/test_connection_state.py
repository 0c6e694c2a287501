"""A connection's life: the ways it may go, how it closes, and a wrong move raising at once."""

from __future__ import annotations

import pytest

from antiphon.gateway.connection.connection_state import (
    DRAIN,
    TRANSITIONS,
    ClientGone,
    Closed,
    Closing,
    ConnectionState,
    IllegalTransition,
    Leaving,
    Opening,
    Serving,
    State,
)
from antiphon.gateway.errors import ClientError

SLOW = Leaving("slow_consumer", 1008, ClientError("slow_consumer", "too slow"), ends_session=True)


async def walk(*states: State) -> ConnectionState:
    s = ConnectionState()
    for state in states:
        s.to(state)
    return s


@pytest.mark.parametrize(
    "path",
    [
        # The client leaves (a goodbye or a drop) while its session is served.
        [Serving(), ClientGone(), Closing(), Closed()],
        # The gateway closes it: a client at fault, or a drain.
        [Serving(), SLOW, Closing(1008, "slow_consumer"), Closed()],
        # A drain before the client opened a session.
        [DRAIN, Closing(1012, "service_restart"), Closed()],
        # The session is over for this socket (or no replica takes it back).
        [Serving(), Closing(1011), Closed()],
        # Gone before it opened a session, or its URL could not open one.
        [Closing(1008), Closed()],
    ],
)
async def test_every_way_a_connection_ends_closes_it(path: list[State]) -> None:
    s = await walk(*path)
    assert s.state == Closed()


async def test_a_connection_starts_opening() -> None:
    assert ConnectionState().state == Opening()


@pytest.mark.parametrize(
    ("before", "wrong"),
    [
        # A socket whose client left is never served again, nor left by the gateway.
        ([Serving(), ClientGone()], Serving()),
        ([Serving(), ClientGone()], DRAIN),
        # One leaving only: the gateway's first reason wins, and is not a client's close.
        ([Serving(), DRAIN], SLOW),
        ([Serving(), DRAIN], ClientGone()),
        # A close is decided once.
        ([Closing(1011)], Closing(1000)),
        ([Serving(), SLOW, Closing(1008, "slow_consumer")], DRAIN),
        # Closing skips neither the last frames nor the close frame.
        ([], Closed()),
        ([Serving()], Closed()),
        # Closed is final; and serving is never entered twice.
        ([Closing(), Closed()], Opening()),
        ([Serving()], Serving()),
    ],
)
async def test_a_move_the_life_does_not_allow_raises_and_changes_nothing(
    before: list[State], wrong: State
) -> None:
    s = await walk(*before)
    was = s.state
    assert not s.may(type(wrong))
    with pytest.raises(IllegalTransition):
        s.to(wrong)
    assert s.state == was


async def test_a_leaving_closes_with_its_own_code_and_reason() -> None:
    s = await walk(Serving(), SLOW)
    assert s.closing() == Closing(1008, "slow_consumer")
    s = await walk(DRAIN)
    assert s.closing() == Closing(1012, "service_restart")


@pytest.mark.parametrize("path", [[], [Serving()], [Serving(), ClientGone()]])
async def test_any_other_end_closes_normally(path: list[State]) -> None:
    s = await walk(*path)
    assert s.closing() == Closing(1000, "")


async def test_the_move_into_leaving_is_what_the_serving_waits_on() -> None:
    s = await walk(Serving())
    assert not s.left.done()
    s.to(SLOW)
    assert s.left.done() and s.left.result() is SLOW


async def test_every_state_is_in_the_table_and_only_closed_is_final() -> None:
    assert set(TRANSITIONS) == {Opening, Serving, ClientGone, Leaving, Closing, Closed}
    assert [s for s, nxt in TRANSITIONS.items() if not nxt] == [Closed]
    assert all(Opening not in nxt for nxt in TRANSITIONS.values())
