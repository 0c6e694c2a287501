"""A GPT-Live connection's tap (live/tap.py) and the WebRTC request's body
(live/calls.py `call_request`): what sidebands get, in what shapes, and what
a POST is refused for, without sockets."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Mapping
from typing import Any

import pytest
from openai.types.live.connect_server_event import ConnectServerEvent
from pydantic import TypeAdapter

from antiphon.gateway.dialects.dialect import live_dialect
from antiphon.gateway.dialects.halves import Lent
from antiphon.gateway.errors import ClientError
from antiphon.gateway.live.calls import call_request
from antiphon.gateway.live.tap import SIDEBAND_BACKLOG, Tap, TappedSocket
from tests.support.openai_models import judged, models_of

Json = dict[str, Any]
_MODELS = models_of(ConnectServerEvent)
_UNION: TypeAdapter[Any] = TypeAdapter(ConnectServerEvent)
OFFER = "v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\n"


def drained(events: asyncio.Queue[str | None]) -> list[Json | None]:
    out: list[Json | None] = []
    while not events.empty():
        text = events.get_nowait()
        out.append(None if text is None else json.loads(text))
    return out


def test_the_id_is_known_at_session_started_and_the_client_s_deltas_are_not_fanned_out() -> None:
    found: list[str] = []
    tap = Tap("key", on_started=lambda t: found.append(t.session_id))
    events = tap.watch()
    tap.sent("session.started", json.dumps({"type": "session.started", "session": {"id": "s1"}}))
    tap.sent("session.output_audio.delta", json.dumps({"type": "session.output_audio.delta"}))
    tap.sent("session.usage.updated", json.dumps({"type": "session.usage.updated"}))
    assert found == ["s1"] and tap.session_id == "s1"
    assert [f["type"] for f in drained(events) if f] == ["session.started", "session.usage.updated"]


def test_the_track_is_spanned_contiguously_even_before_a_sideband_attaches() -> None:
    tap = Tap("key")
    convert = tap.track(lambda pcm: pcm[:2])  # the client's own format, whatever it is
    chunk = bytes(4800)  # 100 ms at 24 kHz
    assert convert(chunk) == b"\0\0"
    events = tap.watch()
    convert(chunk)
    convert(b"\1\0" * 2400)
    frames = [f for f in drained(events) if f]
    assert [(f["start_ms"], f["end_ms"]) for f in frames] == [(100, 200), (200, 300)]
    assert base64.b64decode(frames[1]["delta"]) == b"\1\0" * 2400  # the track, not the client's
    assert all(judged(f, _MODELS, _UNION, "sideband", "ConnectServerEvent") == [] for f in frames)


def test_input_is_reflected_at_24_khz_only_while_watched() -> None:
    tap = Tap("key")
    tap.heard(bytes(3200), 16000)  # nobody watches: nothing is made
    events = tap.watch()
    for _ in range(5):
        tap.heard(b"\x10\x00" * 1600, 16000)  # 100 ms at 16 kHz
    frames = [f for f in drained(events) if f]
    audio = b"".join(base64.b64decode(f["audio"]) for f in frames)
    assert {f["type"] for f in frames} == {"session.input_audio.append"}
    assert 0.9 * 24000 * 2 * 0.5 <= len(audio) <= 24000 * 2 * 0.5  # less the filter's delay
    assert all(judged(f, _MODELS, _UNION, "sideband", "ConnectServerEvent") == [] for f in frames)


def test_a_sideband_that_does_not_read_is_dropped_and_the_end_closes_the_rest() -> None:
    tap = Tap("key")
    slow, live = tap.watch(), tap.watch()
    for _ in range(SIDEBAND_BACKLOG):
        tap.sent("x", "{}")
    drained(live)
    tap.sent("x", "{}")  # the slow one is full: let go (its close fits)
    assert drained(live) == [{}]
    assert drained(slow)[-1] is None
    tap.close()
    assert drained(live) == [None]
    assert tap.watch().get_nowait() is None  # a sideband after the end closes at once


class _Socket:
    """A client socket fed by a queue (the WebSocket's receive)."""

    def __init__(self) -> None:
        self.incoming: asyncio.Queue[Mapping[str, Any]] = asyncio.Queue()
        self.sent: list[str] = []
        self.query_params: Mapping[str, str] = {}
        self.audio_out = None

    async def receive(self) -> Mapping[str, Any]:
        return await self.incoming.get()

    async def send(self, kind: str, text: str) -> None:
        self.sent.append(kind)

    async def close(self, code: int, reason: str | None) -> None:
        pass


async def test_the_connection_reads_the_client_and_its_sidebands_and_loses_neither() -> None:
    inner, tap = _Socket(), Tap("key")
    socket = TappedSocket(inner, tap)
    events = tap.watch()
    reading = asyncio.ensure_future(socket.receive())
    await asyncio.sleep(0)
    tap.from_sideband('{"type": "session.input_audio.mute"}', events)
    first = await reading
    assert isinstance(first, Mapping) and first["text"] == '{"type": "session.input_audio.mute"}'
    # The client's read that was pending meanwhile is the next one's.
    await inner.incoming.put({"type": "websocket.receive", "text": "client"})
    second = await socket.receive()
    assert isinstance(second, Mapping) and second["text"] == "client"
    await socket.send("session.usage.updated", "{}")
    assert inner.sent == ["session.usage.updated"] and drained(events) == [{}]
    await socket.close(1000, None)


def test_the_dialect_reflects_the_input_before_the_mute_and_spans_the_track() -> None:
    """Through GPT-Live's own halves: the sideband hears what the client sent
    even muted (the model hears zeros), and each released chunk spanned."""
    tap = Tap("key")
    events = tap.watch()
    lent = Lent(
        say=lambda frame: None, refuse=lambda err: None, pinned=None, max_append_bytes=1 << 20
    )
    interpreter, _project = live_dialect(tap).connection_halves(lent)
    interpreter.open({"type": "session.start", "session": {"model": "m"}}, {})
    interpreter.translate({"type": "session.input_audio.mute"})
    loud = b"\x00\x10" * 2400
    cmd = interpreter.translate(
        {"type": "session.input_audio.append", "audio": base64.b64encode(loud).decode()}
    )
    assert cmd is not None and cmd.append_audio.pcm16 == bytes(len(loud))  # the model: zeros
    frames = [f for f in drained(events) if f]
    [reflected] = [f for f in frames if f["type"] == "session.input_audio.append"]
    assert base64.b64decode(reflected["audio"]) == loud
    [delta] = [f for f in frames if f["type"] == "session.output_audio.delta"]
    assert (delta["start_ms"], delta["end_ms"]) == (0, 100)


def _body(**over: Any) -> bytes:
    body: Json = {"session": {"model": "m"}, "transport": {"type": "webrtc", "sdp": OFFER}}
    body.update(over)
    return json.dumps(body).encode()


def test_a_request_gives_the_start_s_session_in_the_call_s_format_and_the_offer() -> None:
    fmt = {"type": "audio/pcmu", "rate": 8000}
    session, sdp = call_request(_body(session={"model": "m", "audio": {"format": fmt}}))
    assert sdp == OFFER
    assert session == {"model": "m", "audio": {"format": {"type": "audio/pcm", "rate": 24000}}}


@pytest.mark.parametrize(
    ("raw", "code", "param"),
    [
        (b"{", "invalid_json", ""),
        (b"null", "missing_required_parameter", "transport"),
        (_body(extra=1), "unknown_parameter", "extra"),
        (
            _body(transport={"type": "webrtc", "sdp": OFFER, "ice": []}),
            "unknown_parameter",
            "transport.ice",
        ),
        (_body(transport={"type": "webrtc"}), "missing_required_parameter", "transport.sdp"),
        (_body(transport={"type": "webrtc", "sdp": 5}), "invalid_value", "transport.sdp"),
        (_body(transport={"type": "webrtc", "sdp": "x"}), "invalid_offer", "transport.sdp"),
        (_body(transport={"type": "sip", "sdp": OFFER}), "invalid_value", "transport.type"),
        (_body(session=None), "missing_required_parameter", "session"),
        (_body(session={"model": "m", "bits": 8}), "unknown_parameter", "session.bits"),
        (_body(session={}), "missing_required_parameter", "session.model"),
        (
            _body(
                session={"model": "m", "audio": {"format": {"type": "audio/pcm", "rate": 44100}}}
            ),
            "invalid_value",
            "session.audio.format.rate",
        ),
        (
            _body(session={"model": "m", "client": {"data_channel": {}}}),
            "unsupported_capability",
            "session.client",
        ),
        (_body(session={"model": "\ud800"}), "invalid_value", ""),
    ],
)
def test_a_bad_request_is_refused_with_its_code_and_param(
    raw: bytes, code: str, param: str
) -> None:
    with pytest.raises(ClientError) as refused:
        call_request(raw)
    assert (refused.value.code, refused.value.param) == (code, param)
