"""The events OpenAI's GA protocol defines (`ga_events`), as the duplex dialect
sends them: their GA fields, and the official `openai` SDK parses each into its model."""

from __future__ import annotations

import typing

import pytest
from google.protobuf.message import Message

from antiphon.gateway.dialects.projector import project
from antiphon.v1 import common_pb2 as cpb
from antiphon.v1 import session_pb2 as spb
from tests.gateway import server_events as server

# Duplex-only (tier 3) kinds: no OpenAI model exists for them.
TIER3_KINDS = {
    "session_closed",
    "heartbeat_ack",
    "response_speak",
    "response_listen",
    "session_resumed",
    "session_replaced",
    "session_expired",
    "resync_required",
    "playback_acknowledged",
    "overlap_decision",
    "function_call_malformed",
    "context_appended",
}


# -------------------------------------------------------------------- input
def test_speech_events_carry_their_offsets() -> None:
    started = project(
        server.event("speech_started", spb.SpeechStarted(audio_start_ms=1040, item_id="i"))
    )
    assert (started["audio_start_ms"], started["item_id"]) == (1040, "i")
    stopped = project(
        server.event("speech_stopped", spb.SpeechStopped(audio_end_ms=2860, item_id="i"))
    )
    assert (stopped["audio_end_ms"], stopped["item_id"]) == (2860, "i")


@pytest.mark.parametrize("kind", ["item_added", "item_created", "item_done"])
def test_item_events_carry_a_realtime_item(kind: str) -> None:
    user = cpb.Item(
        id="item_9b2d",
        type="message",
        role="user",
        status="completed",
        content=[cpb.ContentPart(type="input_audio", transcript="what is the weather")],
    )
    wire = project(server.event(kind, spb.ItemEvent(previous_item_id="", item=user)))
    assert wire["previous_item_id"] is None
    assert wire["item"] == {
        "id": "item_9b2d",
        "object": "realtime.item",
        "type": "message",
        "role": "user",
        "status": "completed",
        "content": [{"type": "input_audio", "transcript": "what is the weather"}],
    }
    chained = project(server.event(kind, spb.ItemEvent(previous_item_id="item_a", item=user)))
    assert chained["previous_item_id"] == "item_a"


def test_transcription_delta_shape() -> None:
    wire = project(
        server.event("transcription_delta", spb.TranscriptionDelta(item_id="i", delta=" there"))
    )
    assert (wire["item_id"], wire["content_index"], wire["delta"]) == ("i", 0, " there")


def test_transcription_completed_shape() -> None:
    wire = project(
        server.event(
            "transcription_completed",
            spb.TranscriptionCompleted(item_id="i", content_index=0, transcript="hello"),
        )
    )
    assert (wire["item_id"], wire["content_index"], wire["transcript"]) == ("i", 0, "hello")
    # OpenAI requires usage, in its full shape (`input_token_details` too: a
    # TypeScript client drops a transcription without it); no separate
    # transcription model runs, so it is zero tokens.
    assert wire["usage"] == {
        "type": "tokens",
        "input_tokens": 0,
        "output_tokens": 0,
        "total_tokens": 0,
        "input_token_details": {"audio_tokens": 0, "text_tokens": 0},
    }


def test_item_added_and_created_are_both_projected_with_the_same_body() -> None:
    """Both generations of OpenAI client: GA `.added` and beta `.created`."""
    body = spb.ItemEvent(previous_item_id="item_a", item=server.assistant_item("in_progress"))
    added = project(server.event("item_added", body))
    created = project(server.event("item_created", body))
    assert (added["type"], created["type"]) == (
        "conversation.item.added",
        "conversation.item.created",
    )
    strip = ("type", "event_id", "server_event_seq")
    assert {k: v for k, v in added.items() if k not in strip} == {
        k: v for k, v in created.items() if k not in strip
    }


def test_output_item_events_shape() -> None:
    for kind in ("output_item_added", "output_item_done"):
        wire = project(
            server.event(
                kind,
                spb.OutputItemEvent(
                    response_id="resp_01", output_index=0, item=server.assistant_item()
                ),
            )
        )
        assert (wire["response_id"], wire["output_index"]) == ("resp_01", 0)
        assert wire["item"]["object"] == "realtime.item"
        assert wire["item"]["role"] == "assistant"


@pytest.mark.parametrize("kind", ["content_part_added", "content_part_done"])
def test_content_part_events_carry_the_part_address(kind: str) -> None:
    audio = project(
        server.event(
            kind,
            spb.ContentPartEvent(
                ref=server.REF, part=cpb.ContentPart(type="audio", transcript="t")
            ),
        )
    )
    assert {k: audio[k] for k in ("response_id", "item_id", "output_index", "content_index")} == {
        "response_id": "resp_01",
        "item_id": "item_resp_01",
        "output_index": 0,
        "content_index": 0,
    }
    assert audio["part"] == {"type": "audio", "transcript": "t"}
    text = project(
        server.event(
            kind, spb.ContentPartEvent(ref=server.REF, part=cpb.ContentPart(type="text", text="x"))
        )
    )
    assert text["part"] == {"type": "text", "text": "x"}


def test_text_and_transcript_deltas_and_dones() -> None:
    assert (
        project(server.event("audio_transcript_delta", spb.TextDelta(ref=server.REF, delta="It")))[
            "delta"
        ]
        == "It"
    )
    assert (
        project(server.event("text_delta", spb.TextDelta(ref=server.REF, delta="To")))["delta"]
        == "To"
    )
    done = project(
        server.event("audio_transcript_done", spb.TextDone(ref=server.REF, text="It is sunny."))
    )
    assert done["transcript"] == "It is sunny."
    text_done = project(server.event("text_done", spb.TextDone(ref=server.REF, text="Tomorrow.")))
    assert text_done["text"] == "Tomorrow."
    audio_done = project(server.event("audio_done", spb.PartDone(ref=server.REF)))
    assert set(audio_done) == {
        "type",
        "event_id",
        "server_event_seq",
        "response_id",
        "item_id",
        "output_index",
        "content_index",
    }


def test_rate_limits_updated_is_an_empty_list() -> None:
    assert project(server.event("rate_limits_updated"))["rate_limits"] == []


# ---------------------------------------------------- output and input control
def test_output_audio_buffer_cleared_names_the_response() -> None:
    wire = project(
        server.event("output_audio_cleared", spb.OutputAudioCleared(response_id="resp_01"))
    )
    assert wire["type"] == "output_audio_buffer.cleared"
    assert wire["response_id"] == "resp_01"


# ------------------------------------------------------------- function calls
def test_function_call_arguments_delta_and_done_address_the_call() -> None:
    delta = project(
        server.event(
            "function_call_arguments_delta",
            spb.FunctionCallArguments(ref=server.FC_REF, call_id="call_7d1f", arguments='{"city":'),
        )
    )
    address = {
        "response_id": "resp_fc_01",
        "item_id": "item_fc_01",
        "output_index": 0,
        "call_id": "call_7d1f",
    }
    assert delta["type"] == "response.function_call_arguments.delta"
    assert {k: delta[k] for k in address} == address
    assert delta["delta"] == '{"city":'
    assert "content_index" not in delta
    done = project(
        server.event(
            "function_call_arguments_done",
            spb.FunctionCallArguments(
                ref=server.FC_REF, call_id="call_7d1f", arguments='{"city":"HK"}'
            ),
        )
    )
    assert {k: done[k] for k in address} == address
    assert done["arguments"] == '{"city":"HK"}'


# ------------------------------------------------------- official openai SDK
def _examples() -> dict[str, Message]:
    user = cpb.Item(
        id="item_9b2d",
        type="message",
        role="user",
        status="completed",
        content=[cpb.ContentPart(type="input_audio", transcript="hi")],
    )
    return {
        # OpenAI's default input rate: its SDK types only 24 kHz PCM.
        "session_created": server.state(
            input_audio_format=cpb.AudioFormat(encoding="pcm16", sample_rate_hz=24000)
        ),
        "session_updated": server.state(
            input_audio_format=cpb.AudioFormat(encoding="pcm16", sample_rate_hz=24000),
            turn_detection=cpb.TurnDetection(mode=cpb.TURN_DETECTION_MODE_NONE),
        ),
        "error": spb.ErrorEvent(type="invalid_request_error", code="c", message="m"),
        "speech_started": spb.SpeechStarted(audio_start_ms=10, item_id="item_9b2d"),
        "speech_stopped": spb.SpeechStopped(audio_end_ms=900, item_id="item_9b2d"),
        "input_committed": spb.InputCommitted(item_id="item_9b2d", turn_id=1),
        "item_added": spb.ItemEvent(item=user),
        "item_created": spb.ItemEvent(item=user),
        "item_done": spb.ItemEvent(previous_item_id="item_9b2d", item=server.assistant_item()),
        "output_item_added": spb.OutputItemEvent(
            response_id="resp_01", item=server.assistant_item("in_progress")
        ),
        "output_item_done": spb.OutputItemEvent(
            response_id="resp_01", item=server.assistant_item()
        ),
        "content_part_added": spb.ContentPartEvent(
            ref=server.REF, part=cpb.ContentPart(type="audio", transcript="")
        ),
        "content_part_done": spb.ContentPartEvent(
            ref=server.REF, part=cpb.ContentPart(type="audio", transcript="It is sunny.")
        ),
        "audio_delta": spb.AudioDelta(
            ref=server.REF,
            audio=b"\x01\x00" * 4,
            format=cpb.AudioFormat(encoding="pcm16", sample_rate_hz=24000),
        ),
        "audio_transcript_delta": spb.TextDelta(ref=server.REF, delta="It"),
        "text_delta": spb.TextDelta(ref=server.REF, delta="It"),
        "audio_done": spb.PartDone(ref=server.REF),
        "audio_transcript_done": spb.TextDone(ref=server.REF, text="It is sunny."),
        "text_done": spb.TextDone(ref=server.REF, text="It is sunny."),
        "transcription_completed": spb.TranscriptionCompleted(item_id="item_9b2d", transcript="hi"),
        "transcription_delta": spb.TranscriptionDelta(item_id="item_9b2d", delta=" there"),
        "item_deleted": spb.ItemDeleted(item_id="item_9b2d"),
        "item_retrieved": spb.ItemRetrieved(item=server.assistant_item()),
        "item_truncated": spb.ItemTruncated(
            item_id="item_resp_01", content_index=0, audio_end_ms=1850, transcript="It is"
        ),
        "output_audio_cleared": spb.OutputAudioCleared(response_id="resp_01"),
        "input_cancelled": spb.InputCancelled(session_id="sess_demo_01", epoch=2),
        "function_call_arguments_delta": spb.FunctionCallArguments(
            ref=server.FC_REF, call_id="call_7d1f", arguments='{"city":'
        ),
    }


@pytest.mark.parametrize("kind", [k for k in server.KINDS if k not in TIER3_KINDS])
def test_openai_sdk_parses_every_openai_named_event_into_its_model(kind: str) -> None:
    """A stock `openai` client dispatches each OpenAI-named event to the model of that name."""
    parsed = server.sdk_parse(project(server.event(kind, _examples().get(kind))))
    type_field = type(parsed).model_fields["type"].annotation
    assert typing.get_args(type_field) == (server.WIRE_TYPE[kind],)


@pytest.mark.parametrize("kind", [*sorted(_examples()), "input_cleared", "rate_limits_updated"])
def test_tier1_events_validate_strictly_against_openai_sdk_models(kind: str) -> None:
    """Tier 1/2 shapes are OpenAI's: the SDK's own pydantic models accept them as they are."""
    wire = project(server.event(kind, _examples().get(kind)))
    model = type(server.sdk_parse(wire))
    model.model_validate(wire)


def test_function_call_arguments_done_validates_against_the_openai_sdk_model() -> None:
    """OpenAI's `.done` names the function it completes."""
    wire = project(
        server.event(
            "function_call_arguments_done",
            spb.FunctionCallArguments(
                ref=server.FC_REF, call_id="call_7d1f", name="get_weather", arguments="{}"
            ),
        )
    )
    assert wire["name"] == "get_weather"
    type(server.sdk_parse(wire)).model_validate(wire)
