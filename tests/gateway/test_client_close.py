"""How a client's socket ended, as its session is told: a goodbye, or a drop."""

from __future__ import annotations

import pytest

from antiphon.gateway.connection.client_close import client_gone, is_last


@pytest.mark.parametrize("code", [1000, 1001])
def test_normal_closure_and_going_away_are_a_goodbye(code: int) -> None:
    gone = client_gone(code).client_gone
    assert (gone.clean, gone.close_code) == (True, code)


@pytest.mark.parametrize(
    "code",
    [
        1005,  # no status: what uvicorn also reports for a lost connection
        1006,  # no close frame at all
        1011,  # the client's own failure
        1012,  # our server restarting (a gateway draining)
        4000,  # an application's code
    ],
)
def test_every_other_end_only_detaches(code: int) -> None:
    assert client_gone(code).client_gone.clean is False


def test_the_goodbye_is_the_last_command_of_a_connection() -> None:
    assert is_last(client_gone(1000))
