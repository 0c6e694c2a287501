"""The events OpenAI's GA protocol defines that every dialect sends alike.

For these kinds OpenAI's dialect (`openai_dialect`) and the duplex dialect
(`projector`) send the same wire type with the same GA fields, so both build
their frames from `ga_events`; the duplex dialect adds its extensions to
some of them. Items are the one object the dialects type differently (OpenAI
types a message's content parts by role), so each dialect passes its own.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

from antiphon.common.event_kinds import EventKind
from antiphon.gateway.dialects.shapes import Json, content_part
from antiphon.v1 import common_pb2 as cpb
from antiphon.v1 import session_pb2 as spb

# One kind's frame in a dialect: its wire type, and the fields built from the
# kind's body (the oneof's message, whose type varies with the kind).
Projection = tuple[str, Callable[[Any], Json]]
# How a dialect shapes an item inside its events.
ItemJson = Callable[[cpb.Item], Json]


def part_ref(ref: spb.PartRef) -> Json:
    """The address of a response's content part."""
    return {
        "response_id": ref.response_id,
        "item_id": ref.item_id,
        "output_index": ref.output_index,
        "content_index": ref.content_index,
    }


def _call_ref(e: spb.FunctionCallArguments) -> Json:
    # Function-call events address the output item, not a content part.
    return {
        "response_id": e.ref.response_id,
        "item_id": e.ref.item_id,
        "output_index": e.ref.output_index,
        "call_id": e.call_id,
    }


def transcription_usage() -> Json:
    """OpenAI's required `usage`, in its full shape (a TypeScript client drops a
    transcription whose usage lacks `input_token_details`). No separate
    transcription model runs here (the transcript comes from stage0, as the
    reference says): it uses no tokens."""
    return {
        "type": "tokens",
        "input_tokens": 0,
        "output_tokens": 0,
        "total_tokens": 0,
        "input_token_details": {"audio_tokens": 0, "text_tokens": 0},
    }


def _transcription(e: spb.TranscriptionCompleted) -> Json:
    return {
        "item_id": e.item_id,
        "content_index": e.content_index,
        "transcript": e.transcript,
        "usage": transcription_usage(),
    }


def truncated(e: spb.ItemTruncated) -> Json:
    """Where an item was cut: its part, and the audio kept."""
    return {"item_id": e.item_id, "content_index": e.content_index, "audio_end_ms": e.audio_end_ms}


def _text_delta(e: spb.TextDelta) -> Json:
    return {**part_ref(e.ref), "delta": e.delta}


def _content_part_event(e: spb.ContentPartEvent) -> Json:
    return {**part_ref(e.ref), "part": content_part(e.part)}


def ga_events(item_json: ItemJson) -> dict[EventKind, Projection]:
    """EventKind -> (wire type, GA fields) of every event both dialects send under
    OpenAI's name, with items as `item_json` shapes them."""

    def item_event(e: spb.ItemEvent) -> Json:
        return {"previous_item_id": e.previous_item_id or None, "item": item_json(e.item)}

    def output_item(e: spb.OutputItemEvent) -> Json:
        return {
            "response_id": e.response_id,
            "output_index": e.output_index,
            "item": item_json(e.item),
        }

    return {
        "speech_started": (
            "input_audio_buffer.speech_started",
            lambda e: {"audio_start_ms": e.audio_start_ms, "item_id": e.item_id},
        ),
        "speech_stopped": (
            "input_audio_buffer.speech_stopped",
            lambda e: {"audio_end_ms": e.audio_end_ms, "item_id": e.item_id},
        ),
        "input_committed": (
            "input_audio_buffer.committed",
            lambda e: {
                "previous_item_id": e.previous_item_id or None,
                "item_id": e.item_id or None,
            },
        ),
        "input_cleared": ("input_audio_buffer.cleared", lambda e: {}),
        # The reference projects the native `input.cancelled` as OpenAI's cleared buffer.
        "input_cancelled": ("input_audio_buffer.cleared", lambda e: {}),
        "item_added": ("conversation.item.added", item_event),
        "item_created": ("conversation.item.created", item_event),
        "item_done": ("conversation.item.done", item_event),
        "item_retrieved": ("conversation.item.retrieved", lambda e: {"item": item_json(e.item)}),
        "item_deleted": ("conversation.item.deleted", lambda e: {"item_id": e.item_id}),
        "item_truncated": ("conversation.item.truncated", truncated),
        "transcription_completed": (
            "conversation.item.input_audio_transcription.completed",
            _transcription,
        ),
        "transcription_delta": (
            "conversation.item.input_audio_transcription.delta",
            lambda e: {"item_id": e.item_id, "content_index": e.content_index, "delta": e.delta},
        ),
        "output_item_added": ("response.output_item.added", output_item),
        "output_item_done": ("response.output_item.done", output_item),
        "content_part_added": ("response.content_part.added", _content_part_event),
        "content_part_done": ("response.content_part.done", _content_part_event),
        "audio_delta": (
            "response.output_audio.delta",
            lambda e: {**part_ref(e.ref), "delta": base64.b64encode(e.audio).decode("ascii")},
        ),
        "audio_transcript_delta": ("response.output_audio_transcript.delta", _text_delta),
        "text_delta": ("response.output_text.delta", _text_delta),
        "audio_done": ("response.output_audio.done", lambda e: part_ref(e.ref)),
        "audio_transcript_done": (
            "response.output_audio_transcript.done",
            lambda e: {**part_ref(e.ref), "transcript": e.text},
        ),
        "text_done": (
            "response.output_text.done",
            lambda e: {**part_ref(e.ref), "text": e.text},
        ),
        "function_call_arguments_delta": (
            "response.function_call_arguments.delta",
            lambda e: {**_call_ref(e), "delta": e.arguments},
        ),
        "function_call_arguments_done": (
            "response.function_call_arguments.done",
            lambda e: {**_call_ref(e), "name": e.name, "arguments": e.arguments},
        ),
        "rate_limits_updated": ("rate_limits.updated", lambda e: {"rate_limits": []}),
        "output_audio_cleared": (
            "output_audio_buffer.cleared",
            lambda e: {"response_id": e.response_id},
        ),
    }
