"""The duplex dialect's JSON for the typed objects its events carry: the
session, items and their content, responses, errors, playback and turn
detection.

`projector` builds each event around these; OpenAI's dialect reuses those
whose shape OpenAI shares (`item`, `content_part`, `turn_detection`, `error`).
"""

from __future__ import annotations

from typing import Any

from antiphon.gateway.translate.audio_formats import ga_format
from antiphon.gateway.translate.tools import tool_choice_json, tools_json
from antiphon.v1 import common_pb2 as cpb
from antiphon.v1 import session_pb2 as spb

# A JSON object as it goes out on the socket.
Json = dict[str, Any]


def session_object(st: spb.SessionState) -> Json:
    c = st.config
    in_rate = c.input_audio_format.sample_rate_hz
    td = turn_detection(c.turn_detection)
    max_tokens: int | str = c.max_output_tokens or "inf"
    return {
        "object": "realtime.session",
        "type": "realtime",
        "id": st.session_id,
        "model": c.model,
        "state": st.state,
        "epoch": st.epoch,
        "turn_id": st.turn_id,
        "active_response_id": st.active_response_id or None,
        "modalities": list(c.output_modalities),
        "output_modalities": list(c.output_modalities),
        "instructions": c.instructions,
        "voice": c.voice,
        "input_audio_format": c.input_audio_format.encoding,
        "output_audio_format": c.output_audio_format.encoding,
        "audio": {
            "input": {
                "format": ga_format(c.input_audio_format),
                "sample_rate_hz": in_rate,
                "turn_detection": td,
            },
            "output": audio_output(c, ga_format(c.output_audio_format)),
        },
        "truncation": truncation(c.truncation),
        "tools": tools_json(c.tools),
        "tool_choice": tool_choice_json(c.tool_choice),
        "turn_detection": td,
        "temperature": c.temperature,
        "max_output_tokens": max_tokens,
        "max_response_output_tokens": max_tokens,
        "overlap_policy": c.overlap_policy,
        "playback_commit_policy": c.playback_commit_policy,
        "resumable": c.resumable,
        "playback": playback(st.playback),
        "capabilities": capabilities(st.capabilities),
        "extra_body": {
            "native_duplex": c.native_duplex,
            "auto_response": c.auto_response,
            "return_stage_metrics": c.return_stage_metrics,
        },
    }


def audio_output(c: cpb.SessionConfig, fmt: Json) -> Json:
    """`audio.output`: the format, the voice that speaks, its speed."""
    return {"format": fmt, "voice": c.voice, "speed": c.speed or 1.0}


def truncation(t: cpb.Truncation) -> str | Json:
    """OpenAI's spelling: "auto" / "disabled", or the retention ratio object."""
    if t.type == "retention_ratio":
        return {"type": "retention_ratio", "retention_ratio": t.retention_ratio}
    return t.type or "auto"


def turn_detection(td: cpb.TurnDetection) -> Json | None:
    # Both server-side modes end with what a detected turn sets off.
    then = {"create_response": td.create_response, "interrupt_response": td.interrupt_response}
    if td.mode == cpb.TURN_DETECTION_MODE_SEMANTIC_VAD:
        return {"type": "semantic_vad", "eagerness": td.eagerness or "auto", **then}
    if td.mode != cpb.TURN_DETECTION_MODE_SERVER_VAD:
        return None
    return {
        "type": "server_vad",
        "threshold": round(td.threshold, 4),
        "prefix_padding_ms": td.prefix_padding_ms,
        "silence_duration_ms": td.silence_duration_ms,
        **then,
    }


def capabilities(c: cpb.Capabilities) -> Json:
    return {
        "implementation_level": c.implementation_level,
        "supports_input_append": c.supports_input_append,
        "supports_barge_in": c.supports_barge_in,
        "supports_session_resume": c.supports_session_resume,
        "supports_audio_truncate": c.supports_audio_truncate,
        "chunk_period_ms": c.chunk_period_ms,
        "input_modes": list(c.input_modes),
        # Camera frames on appends (`video_frames`): seen by the model, or dropped.
        "supports_video_frames": c.consumes_video_frames,
    }


def playback(p: cpb.Playback) -> Json:
    return {
        "generated_ms": p.generated_ms,
        "sent_ms": p.sent_ms,
        "played_ms": p.played_ms,
        "committed_ms": p.committed_ms,
    }


def content_part(part: cpb.ContentPart) -> Json:
    if part.type in ("input_text", "output_text", "text"):
        return {"type": part.type, "text": part.text}
    return {"type": part.type, "transcript": part.transcript}


def item(it: cpb.Item) -> Json:
    """A `realtime.item`; function calls and their outputs have no role or content."""
    base: Json = {"id": it.id, "object": "realtime.item", "type": it.type, "status": it.status}
    if it.type == "function_call":
        return {**base, "name": it.name, "call_id": it.call_id, "arguments": it.arguments}
    if it.type == "function_call_output":
        return {**base, "call_id": it.call_id, "output": it.output}
    return {**base, "role": it.role, "content": [content_part(p) for p in it.content]}


def error(e: spb.ErrorEvent, code: str) -> Json:
    """An `error` event's object; `code` as the dialect names the refusal."""
    return {
        "type": e.type,
        "code": code,
        "message": e.message,
        "param": e.param or None,
        "event_id": e.event_id or None,
    }


def response_object(r: spb.Response, duplex_type: str) -> Json:
    metadata: Json = dict(r.metadata)
    metadata["duplex_event"] = {
        "type": duplex_type,
        "session_id": r.session_id,
        "response_id": r.id,
        "epoch": r.epoch,
        "turn_id": r.turn_id,
    }
    if duplex_type == "response.done":
        metadata["committed"] = r.committed
        metadata["playback"] = playback(r.playback)
    if r.has_stage_metrics:
        m = r.stage_metrics
        metadata["stage_metrics"] = {
            "vllm_ttft_ms": m.ttft_ms,
            "vllm_tpot_ms": m.tpot_ms,
            "vllm_itls_ms": list(m.itl_ms),
            "num_prompt_tokens": m.num_prompt_tokens,
            "num_generation_tokens": m.num_generation_tokens,
            "stage1_first_audio_ms": m.stage1_first_audio_ms,
            "prompt": m.prompt,
        }
    details = {"type": r.status, "reason": r.status_reason} if r.status_reason else None
    return {
        "id": r.id,
        "object": "realtime.response",
        "status": r.status,
        "status_details": details,
        "output": [item(i) for i in r.output],
        "modalities": list(r.output_modalities),
        "output_modalities": list(r.output_modalities),
        "metadata": metadata,
    }
