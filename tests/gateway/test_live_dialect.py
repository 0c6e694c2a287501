"""GPT-Live's two halves (`live.inbound`, `live.outbound`) over one socket's state:
strict start, events before it, echoed client ids, typed refusals, the end."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from openai.types.live import ClientEvent

from antiphon.gateway.dialects.dialect import LIVE
from antiphon.gateway.dialects.halves import Interpreter, Lent, Projector
from antiphon.gateway.errors import ClientError
from antiphon.v1 import common_pb2 as cpb
from antiphon.v1 import session_pb2 as spb
from tests.gateway import server_events as server
from tests.support.live_models import violations
from tests.support.openai_models import models_of

MODEL: dict[str, Any] = {
    "model": "gpt-live-1",
    "instructions": "Be kind.",
    "audio": {"format": {"type": "audio/pcm", "rate": 24000}, "output": {"voice": "marin"}},
}
MOSHI = cpb.Capabilities(implementation_level="model_native_duplex", model_native=True)
CASCADE = cpb.Capabilities(implementation_level="cascade")
START: dict[str, Any] = {"type": "session.start", "event_id": "evt_start", "session": MODEL}
MAX_APPEND = 48000


class Socket:
    """One connection's halves, and what they sent or refused outside the session."""

    def __init__(self) -> None:
        self.said: list[dict[str, Any]] = []
        self.refused: list[ClientError] = []
        lent = Lent(self.said.append, self.refused.append, None, MAX_APPEND)
        halves: tuple[Interpreter, Projector] = LIVE.connection_halves(lent)
        self.inbound, self.project = halves

    def start(self, event: dict[str, Any] = START, caps: cpb.Capabilities = MOSHI) -> list[Any]:
        cmd = self.inbound.open(event, {})
        assert cmd.WhichOneof("kind") == "open"
        st = server.state(model="gpt-live-1", voice="joe")
        st.capabilities.CopyFrom(caps)
        st.expires_at = 1_900_000_000
        return self.project(server.event("session_created", st))

    def append(self, pcm16: bytes, **extra: Any) -> spb.ClientCommand | None:
        audio = base64.b64encode(pcm16).decode()
        return self.inbound.translate(
            {"type": "session.input_audio.append", "audio": audio, **extra}
        )


def refusal(call: Any, *args: Any) -> ClientError:
    with pytest.raises(ClientError) as info:
        call(*args)
    return info.value


def with_session(**fields: Any) -> dict[str, Any]:
    return {**START, "session": {**MODEL, **fields}}


def test_the_start_opens_the_session_and_is_answered_with_the_resolved_resource() -> None:
    sock = Socket()
    cmd = sock.inbound.open(START, {})
    patch = cmd.open.config
    assert (cmd.client_type, cmd.event_id) == ("session.start", "evt_start")
    assert (patch.model, patch.instructions, patch.voice) == ("gpt-live-1", "Be kind.", "marin")
    assert (patch.input_audio_format.encoding, patch.input_audio_format.sample_rate_hz) == (
        "pcm16",
        24000,
    )
    [started] = sock.start()
    assert started["type"] == "session.started" and started["client_event_id"] == "evt_start"
    session = started["session"]
    assert (session["id"], session["status"], session["expires_at"]) == (
        "sess_demo_01",
        "active",
        1_900_000_000,
    )
    assert session["audio"] == {
        "format": {"type": "audio/pcm", "rate": 24000},
        "output": {"voice": "joe"},  # the voice that really speaks
    }
    assert violations(started) == []


@pytest.mark.parametrize(
    ("event", "code", "param"),
    [
        ({**START, "extra": 1}, "unknown_parameter", "extra"),
        (with_session(voice="marin"), "unknown_parameter", "session.voice"),
        (
            with_session(audio={"format": {"type": "audio/pcm", "rate": 44100}}),
            "invalid_value",
            "session.audio.format.rate",
        ),
        (
            with_session(audio={"format": {"type": "audio/wav"}}),
            "invalid_value",
            "session.audio.format.type",
        ),
        (
            with_session(audio={"format": {"type": "pcm16", "rate": 24000}}),
            "invalid_value",
            "session.audio.format.type",
        ),
        (
            with_session(audio={"format": {"type": "audio/pcmu", "rate": 16000}}),
            "invalid_value",
            "session.audio.format.rate",
        ),
        (
            with_session(audio={"format": {"type": "audio/pcm", "bits": 16}}),
            "unknown_parameter",
            "session.audio.format.bits",
        ),
        (
            with_session(input=[{"role": "user", "content": [{"text": "hi"}]}]),
            "unsupported_capability",
            "input",
        ),
        (
            with_session(delegation={"type": "decisions", "decisions": {}}),
            "unsupported_capability",
            "session.delegation.type",
        ),
        (
            with_session(delegation={"type": "client", "responses": {"model": "m"}}),
            "unknown_parameter",
            "session.delegation.responses",
        ),
        (
            with_session(delegation={"type": "responses"}),
            "missing_required_parameter",
            "session.delegation.responses",
        ),
        (
            with_session(delegation={"type": "responses", "responses": {"tools": []}}),
            "missing_required_parameter",
            "session.delegation.responses.model",
        ),
        (
            with_session(
                delegation={
                    "type": "responses",
                    "responses": {"model": "m", "tools": [{"type": "web_search"}]},
                }
            ),
            "unsupported_capability",
            "session.delegation.responses.tools[0].type",
        ),
        (
            with_session(delegation={"type": "responses", "responses": {"model": "m", "top": 1}}),
            "unknown_parameter",
            "session.delegation.responses.top",
        ),
        (with_session(store=True), "unsupported_capability", "session.store"),
        (
            {"type": "session.start", "session": {"instructions": "x"}},
            "missing_required_parameter",
            "session.model",
        ),
    ],
)
def test_a_strict_start_refuses_what_it_does_not_define_or_serve(
    event: dict[str, Any], code: str, param: str
) -> None:
    err = refusal(Socket().inbound.open, event, {})
    assert (err.code, err.param) == (code, param), err.message


def test_events_before_the_start_are_refused_and_change_nothing() -> None:
    sock = Socket()
    for etype in ("session.input_audio.append", "session.close", "session.update"):
        err = refusal(sock.inbound.open, {"type": etype, "event_id": "e0"}, {})
        assert err.code == "session_not_started"
    assert sock.said == [] and sock.inbound.open(START, {}).WhichOneof("kind") == "open"


def test_a_second_start_is_refused_the_config_is_immutable() -> None:
    sock = Socket()
    sock.start()
    assert refusal(sock.inbound.translate, START).code == "session_already_started"
    update = {"type": "session.update", "session": {"model": "gpt-live-2"}}
    assert refusal(sock.inbound.translate, update).code == "unknown_parameter"


def test_g711_at_8_khz_is_declared_to_the_session_and_16_khz_pcm_too() -> None:
    for fmt, enc in (
        ({"type": "audio/pcmu", "rate": 8000}, "g711_ulaw"),
        ({"type": "audio/pcma", "rate": 8000}, "g711_alaw"),
        ({"type": "audio/pcm", "rate": 16000}, "pcm16"),
    ):
        cmd = Socket().inbound.open(with_session(audio={"format": fmt}), {})
        declared = cmd.open.config.input_audio_format
        assert (declared.encoding, declared.sample_rate_hz) == (enc, fmt["rate"])
        # The session speaks the track's PCM at 24 kHz; the gateway converts it.
        assert cmd.open.config.output_audio_format.sample_rate_hz == 24000


def test_an_append_is_decoded_once_and_its_audio_advances_the_timeline() -> None:
    sock = Socket()
    sock.start()
    cmd = sock.append(b"\x01\x00" * 4800, event_id="a1")
    assert cmd is not None and cmd.append_audio.pcm16 == b"\x01\x00" * 4800
    assert (cmd.event_id, cmd.append_audio.sample_rate_hz) == ("a1", 24000)
    deltas = [f for f in sock.said if f["type"] == "session.output_audio.delta"]
    assert len(deltas) == 2  # 200 ms in, 200 ms of (silent) output out


def test_oversize_and_malformed_appends_get_typed_errors() -> None:
    sock = Socket()
    sock.start()
    assert refusal(sock.append, bytes(MAX_APPEND + 2)).code == "audio_too_large"
    bad = {"type": "session.input_audio.append", "audio": "not base64!"}
    assert refusal(sock.inbound.translate, bad).code == "invalid_audio"
    odd = {"type": "session.input_audio.append", "audio": "AAA=", "format": "pcm16"}
    assert refusal(sock.inbound.translate, odd).code == "unknown_parameter"
    assert sock.said == []  # nothing refused moved the clock


def test_mute_answers_at_once_and_muted_input_is_silence_on_the_timeline() -> None:
    sock = Socket()
    sock.start()
    assert sock.inbound.translate({"type": "session.input_audio.mute", "event_id": "m1"}) is None
    assert sock.said[-1]["type"] == "session.input_audio.muted"
    assert sock.said[-1]["client_event_id"] == "m1"
    cmd = sock.append(b"\x07\x00" * 2400)
    assert cmd is not None and cmd.append_audio.pcm16 == bytes(4800)
    assert sock.said[-1]["type"] == "session.output_audio.delta"  # the clock went on
    sock.inbound.translate({"type": "session.input_audio.unmute", "event_id": "m2"})
    assert (sock.said[-1]["type"], sock.said[-1]["client_event_id"]) == (
        "session.input_audio.unmuted",
        "m2",
    )
    cmd = sock.append(b"\x07\x00" * 2400)
    assert cmd is not None and cmd.append_audio.pcm16 == b"\x07\x00" * 2400
    assert all(violations(f) == [] for f in sock.said)


@pytest.mark.parametrize(
    "etype",
    ["session.instructions.append", "session.thinking.append", "session.commentary.append"],
)
def test_text_into_the_model_s_context_goes_to_the_session_and_is_told_when_taken(
    etype: str,
) -> None:
    sock = Socket()
    sock.start()
    channel = etype.split(".")[1]
    event = {"type": etype, "event_id": "c1", "content": "The user is called Ada."}
    cmd = sock.inbound.translate({**event, "delegation_id": None})
    assert cmd is not None and cmd.event_id == "c1"
    assert (cmd.append_context.channel, cmd.append_context.text) == (channel, event["content"])
    err = refusal(sock.inbound.translate, {**event, "delegation_id": "del_1"})
    assert err.code == "delegation_not_found"
    sock.append(bytes(9600))  # 200 ms of input: 200 ms of track out
    taken = spb.ContextAppended(channel=channel, client_event_id="c1", frame_index=3)
    [frame] = sock.project(server.event("context_appended", taken))
    assert frame["type"] == f"session.{channel}.appended"
    assert (frame["start_ms"], frame["end_ms"], frame["client_event_id"]) == (200, 200, "c1")
    assert violations(frame) == []


def test_a_delegation_update_changes_its_settings_not_its_type() -> None:
    sock = Socket()
    responses = {"model": "qwen", "tools": [{"type": "function", "name": "get_weather"}]}
    sock.start(with_session(delegation={"type": "responses", "responses": responses}))
    tools = [{"type": "function", "name": "book"}]
    update = {
        "type": "session.update",
        "event_id": "u1",
        "session": {"delegation": {"type": "responses", "responses": {"tools": tools}}},
    }
    assert sock.inbound.translate(update) is None
    [updated] = [f for f in sock.said if f["type"] == "session.updated"]
    assert updated["client_event_id"] == "u1" and violations(updated) == []
    delegation = updated["session"]["delegation"]
    assert delegation["responses"] == {"model": "qwen", "tools": tools}
    err = refusal(
        sock.inbound.translate,
        {"type": "session.update", "session": {"delegation": {"type": "client"}}},
    )
    assert (err.code, err.param) == ("invalid_value", "session.delegation.type")
    cmd = sock.inbound.translate({"type": "response.create", "event_id": "r1"})
    assert cmd is not None and cmd.create_response.delegated
    assert [t.name for t in cmd.create_response.tools] == ["book"]


def test_responses_items_become_the_session_s_items_and_need_a_responses_delegation() -> None:
    sock = Socket()
    sock.start(with_session(delegation={"type": "responses", "responses": {"model": "qwen"}}))
    cmd = sock.inbound.translate(
        {"type": "response.item.create", "item": {"role": "developer", "content": "Be brief."}}
    )
    assert cmd is not None
    item = cmd.create_item.item
    assert (item.type, item.role, item.content[0].type) == ("message", "system", "input_text")
    output = {"type": "function_call_output", "call_id": "call_1", "output": '{"t": 21}'}
    cmd = sock.inbound.translate({"type": "response.item.create", "item": output})
    assert cmd is not None
    assert (cmd.create_item.item.call_id, cmd.create_item.item.output) == ("call_1", '{"t": 21}')
    err = refusal(
        sock.inbound.translate,
        {"type": "response.item.create", "item": {"type": "reasoning", "summary": []}},
    )
    assert err.code == "unsupported_capability"
    plain = Socket()
    plain.start()
    for event in ({"type": "response.create"}, {"type": "response.item.create", "item": output}):
        assert refusal(plain.inbound.translate, event).code == "responses_delegation_required"


def test_errors_echo_the_client_event_id_in_openai_s_shape() -> None:
    sock = Socket()
    sock.start()
    rejected = spb.ErrorEvent(
        type="invalid_request_error",
        code="audio_too_large",
        message="too big",
        param="audio",
        event_id="a9",
    )
    [frame] = sock.project(server.event("error", rejected))
    assert frame["client_event_id"] == "a9" and frame["error"]["client_event_id"] == "a9"
    assert (frame["error"]["code"], frame["error"]["param"]) == ("audio_too_large", "audio")
    assert violations(frame) == []


def test_a_turn_based_backend_is_refused_as_an_invalid_model() -> None:
    sock = Socket()
    assert sock.start(caps=CASCADE) == []
    [err] = sock.refused
    assert (err.code, err.param) == ("invalid_model", "session.model")


def test_the_model_s_speech_becomes_the_track_and_its_text_spans_on_the_timeline() -> None:
    sock = Socket()
    sock.start()
    frames: list[dict[str, Any]] = []
    ref = spb.PartRef(response_id="resp_1", item_id="item_1")
    for word in ("Hi", " there"):
        delta = spb.AudioDelta(ref=ref, audio=b"\x10\x00" * 1920)
        frames += sock.project(server.event("audio_delta", delta))
        frames += sock.project(
            server.event("audio_transcript_delta", spb.TextDelta(ref=ref, delta=word))
        )
    frames += sock.project(server.event("response_done", spb.ResponseEvent()))
    assert frames == []  # nothing plays before the input clock reaches it
    sock.append(bytes(9600))
    spans = [(f["delta"], f["start_ms"], f["end_ms"]) for f in sock.said if "start_ms" in f]
    assert spans == [("Hi", 0, 80), (" there", 80, 160)]
    assert all(violations(f) == [] for f in sock.said)


def test_close_is_answered_with_its_reason_usage_and_the_session() -> None:
    sock = Socket()
    sock.start()
    sock.append(bytes(48000))  # 1 s
    cmd = sock.inbound.translate({"type": "session.close", "event_id": "bye"})
    assert cmd is not None and cmd.WhichOneof("kind") == "close"
    closed = spb.SessionClosed(session_id="sess_01", reason="client_requested")
    [frame] = sock.project(server.event("session_closed", closed))
    assert (frame["type"], frame["reason"], frame["client_event_id"]) == (
        "session.closed",
        "close_requested",
        "bye",
    )
    assert frame["usage"] == {"seconds": 1.0} and frame["session"]["status"] == "active"
    assert violations(frame) == []


@pytest.mark.parametrize(
    ("reason", "closed"),
    [("max_duration_expired", "expired"), ("disconnect_grace_expired", "connection_lost")],
)
def test_an_expiry_closes_with_its_reason(reason: str, closed: str) -> None:
    sock = Socket()
    sock.start()
    [frame] = sock.project(server.event("session_expired", spb.SessionExpired(reason=reason)))
    assert frame["reason"] == closed and violations(frame) == []


def test_a_lost_session_service_closes_as_connection_lost_after_its_error() -> None:
    sock = Socket()
    sock.start()
    lost = spb.ErrorEvent(type="server_error", code="session_unavailable", message="gone")
    frames = sock.project(server.event("error", lost, seq=0))
    assert [f["type"] for f in frames] == ["error", "session.closed"]
    assert frames[1]["reason"] == "connection_lost"


def test_an_event_without_a_kind_is_refused() -> None:
    with pytest.raises(ValueError):
        Socket().project(spb.ServerEvent(seq=1, event_id="event_x"))


@pytest.mark.parametrize("kind", server.KINDS)
def test_every_server_event_kind_is_projected_or_left_out_and_what_goes_out_is_valid(
    kind: str,
) -> None:
    sock = Socket()
    sock.start()
    for frame in sock.project(server.event(kind)):
        assert violations(frame) == [], (kind, frame)


def test_every_client_type_of_the_sdk_is_served_or_refused_by_name() -> None:
    """A type the SDK gains fails here until the interpreter knows it."""
    assert frozenset(models_of(ClientEvent)) == LIVE.client_types
    for etype in LIVE.client_types or ():
        sock = Socket()
        sock.start()
        try:
            sock.inbound.translate({"type": etype})
        except ClientError as err:
            assert err.code != "invalid_value" or err.param != "type", etype


def test_a_string_no_protobuf_can_hold_is_refused_not_a_crash() -> None:
    sock = Socket()
    err = refusal(sock.inbound.open, with_session(model="gpt\ud800live"), {})
    assert err.code == "invalid_value"


def test_session_started_comes_first_even_after_early_audio_and_a_mute() -> None:
    """A client may append before it read `session.started`: what that audio
    released (and the mute's answer) follows it."""
    sock = Socket()
    sock.inbound.open(START, {})
    sock.append(bytes(9600))
    sock.inbound.translate({"type": "session.input_audio.mute"})
    assert sock.said == []
    st = server.state(model="gpt-live-1")
    st.capabilities.CopyFrom(MOSHI)
    frames = sock.project(server.event("session_created", st))
    assert [f["type"] for f in frames] == [
        "session.started",
        "session.output_audio.delta",
        "session.output_audio.delta",
        "session.input_audio.muted",
    ]
