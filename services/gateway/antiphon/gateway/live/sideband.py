"""GPT-Live sidebands: `/v1/live/sessions/{id}/attach` (SDK: `client.live.sideband.connect`).

A sideband is a trusted server's WebSocket on a session that another
connection of this gateway holds (a browser's WebRTC session, or a GPT-Live
WebSocket): it gets every server event that connection's client gets, the
input audio reflected and the output track with its spans (tap.py), and
what it sends is that session's, as if the client had sent it, except
`session.start` (the session has started): refused on the sideband alone.

`Sidebands` is one gateway's registry of the sessions its connections hold,
by session id, from their `session.started` until they end. It is the
gateway's own memory, by design: the media and the connection live in this
process, so a sideband must reach the gateway replica that holds the call
(route `/v1/live/sessions/{id}/attach` by session id to the replica that
answered its `POST /v1/live/sessions`, or keep one gateway per call). An id
this gateway holds no session of, or one of another key, is an `error`
(`session_not_found`) and a close (1008), as are both on any other replica.
The sideband closes (1000) when the session ends; `?graceful_close=` is
taken and changes nothing (the close is always the graceful handshake).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable

from starlette.websockets import WebSocket

from antiphon.common.ids import new_id
from antiphon.gateway.connection.close_codes import CLOSE_POLICY
from antiphon.gateway.connection.fan_out import Events, relay
from antiphon.gateway.edge.edge import Edge
from antiphon.gateway.live.tap import Tap

START = "session.start"
# Sidebands one session may have at once (each is a copy of its events).
MAX_PER_SESSION = 4


class Sidebands:
    """The sessions this gateway's GPT-Live connections hold, for their sidebands."""

    def __init__(self, edge: Edge) -> None:
        self._edge = edge
        self._taps: dict[str, Tap] = {}

    def tap(self, key_id: str) -> Tap:
        """A new connection's tap; it is found by its session id once started."""
        return Tap(key_id, on_started=self._started)

    def _started(self, tap: Tap) -> None:
        self._taps[tap.session_id] = tap

    def drop(self, tap: Tap) -> None:
        """The connection ended: its sidebands close, its id is forgotten."""
        if self._taps.get(tap.session_id) is tap:
            del self._taps[tap.session_id]
        tap.close()

    def __len__(self) -> int:
        return len(self._taps)

    async def attach(self, ws: WebSocket) -> None:
        admitted = await self._edge.admit_socket(ws)
        if admitted is None:
            return
        admitted.lease.release()  # a sideband opens no session of its own
        session_id = ws.path_params["id"]
        tap = self._taps.get(session_id)
        # A browser that offered a subprotocol (its credential rides one) needs one back.
        offered = ws.scope.get("subprotocols") or []
        await ws.accept(subprotocol="realtime" if "realtime" in offered else None)
        if tap is None or tap.key_id != admitted.principal.key_id:
            await _refuse(
                ws,
                "session_not_found",
                f"no live session {session_id!r} on this gateway: a sideband attaches "
                "on the gateway that holds the session",
            )
            return
        if tap.sidebands >= MAX_PER_SESSION:
            await _refuse(
                ws, "sideband_limit", f"a session has at most {MAX_PER_SESSION} sidebands"
            )
            return
        await relay(ws, tap.fan_out, _heard(tap))


def _heard(tap: Tap) -> Callable[[str, Events], None]:
    """What a sideband sends: the connection's, as its client's; but a
    `session.start`, answered on that sideband alone."""

    def heard(text: str, events: Events) -> None:
        start = _start(text)
        if start is None:
            tap.from_sideband(text, events)
        elif not events.full():
            why = "the session has started; a sideband never sends session.start"
            events.put_nowait(_error("session_already_started", why, "type", start))

    return heard


def _start(text: str) -> str | None:
    """A `session.start`'s `event_id` ("" without one); None for any other text."""
    try:
        event = json.loads(text)
    except ValueError:
        return None  # the connection answers bad JSON, as its client's
    if not isinstance(event, dict) or event.get("type") != START:
        return None
    event_id = event.get("event_id")
    return event_id if isinstance(event_id, str) else ""


def _error(code: str, message: str, param: str | None = None, client_event_id: str = "") -> str:
    error = {"type": "invalid_request_error", "code": code, "message": message, "param": param}
    frame: dict[str, object] = {"type": "error", "event_id": new_id("event"), "error": error}
    if client_event_id:
        error["client_event_id"] = frame["client_event_id"] = client_event_id
    return json.dumps(frame)


async def _refuse(ws: WebSocket, code: str, message: str) -> None:
    with contextlib.suppress(Exception):
        await ws.send_text(_error(code, message))
        await ws.close(CLOSE_POLICY)
