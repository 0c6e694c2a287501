"""The builders of the client commands that take nothing but their event:
a resume, acks, commits, text, responses, barge-in and playback.

Each reads its fields through `fields` and raises one ClientError for an
invalid event; `translator` dispatches to them by canonical type, and keeps
to itself the builders that read the connection's declared input encoding.
"""

from __future__ import annotations

from antiphon.common.ids import valid_session_id
from antiphon.gateway.errors import ClientError
from antiphon.gateway.translate import fields, tools
from antiphon.gateway.translate.fields import Event
from antiphon.v1 import session_pb2 as spb

# The turn signals `turn.signal` carries; the reference defines only barge-in.
TURN_SIGNALS = ("barge_in",)
# `barge_in.source` when the client names none.
CLIENT_SIGNAL_SOURCE = "client_event"


def resume(event: Event) -> spb.ClientCommand:
    session_id = fields.string(fields.required(event, "session_id"), "session_id")
    if not valid_session_id(session_id):
        raise ClientError("invalid_value", "`session_id` is not a session id", param="session_id")
    request = spb.ResumeSession(
        session_id=session_id,
        incarnation=fields.non_negative_int(event.get("incarnation", 0), "incarnation"),
        resume_token=fields.string(fields.required(event, "resume_token"), "resume_token"),
        last_received_seq=fields.non_negative_int(
            event.get("last_received_server_event_seq", 0), "last_received_server_event_seq"
        ),
    )
    cmd = spb.ClientCommand(client_type="session.resume", resume=request)
    if isinstance(event.get("event_id"), str):
        cmd.event_id = event["event_id"]
    return cmd


def event_ack(event: Event) -> spb.ClientCommand:
    seq = fields.non_negative_int(fields.required(event, "server_event_seq"), "server_event_seq")
    return spb.ClientCommand(event_ack=spb.EventAck(seq=seq))


def commit(event: Event) -> spb.ClientCommand:
    request = spb.CommitInput()
    if event.get("is_speech") is not None:
        request.is_speech = fields.boolean(event["is_speech"], "is_speech")
    return spb.ClientCommand(commit=request)


def append_text(event: Event) -> spb.ClientCommand:
    text = fields.non_empty_string(fields.required(event, "text"), "text")
    return spb.ClientCommand(append_text=spb.AppendText(text=text))


def response_create(event: Event) -> spb.ClientCommand:
    body = event.get("response") or {}
    if not isinstance(body, dict):
        raise ClientError("invalid_value", "`response` must be an object", param="response")
    req = spb.CreateResponse()
    # null is "not given" (LiveKit's `generate_reply()` sends it): the session's apply.
    if body.get("instructions") is not None:
        req.instructions = fields.string(body["instructions"], "response.instructions")
    modalities = body.get("output_modalities", body.get("modalities"))
    if modalities is not None:
        req.output_modalities.extend(fields.string_list(modalities, "response.output_modalities"))
    if body.get("temperature") is not None:
        req.temperature = fields.number(body["temperature"], "response.temperature")
    tokens = body.get("max_output_tokens", body.get("max_response_output_tokens"))
    if tokens is not None:
        req.max_output_tokens = fields.max_tokens(tokens, "response.max_output_tokens")
    tools.read_into(body, req, "response")
    metadata = body.get("metadata")
    if metadata is not None:
        if not isinstance(metadata, dict):
            raise ClientError(
                "invalid_value", "`metadata` must be an object", param="response.metadata"
            )
        req.metadata.update({str(k): str(v) for k, v in metadata.items()})
    return spb.ClientCommand(create_response=req)


def response_cancel(event: Event) -> spb.ClientCommand:
    rid = event.get("response_id") or ""
    return spb.ClientCommand(
        cancel_response=spb.CancelResponse(response_id=fields.string(rid, "response_id"))
    )


def _barge_in_signal(source: object, param: str) -> spb.BargeIn:
    if source is None:
        return spb.BargeIn(source=CLIENT_SIGNAL_SOURCE)
    return spb.BargeIn(source=fields.non_empty_string(source, param))


def barge_in(event: Event) -> spb.ClientCommand:
    return spb.ClientCommand(barge_in=_barge_in_signal(event.get("source"), "source"))


def turn_signal(event: Event) -> spb.ClientCommand:
    signal = fields.string(fields.required(event, "event"), "event")
    if signal not in TURN_SIGNALS:
        raise ClientError(
            "invalid_value",
            f"turn.signal event {signal!r} is not supported; use one of {TURN_SIGNALS}",
            param="event",
        )
    payload = fields.obj(event.get("payload"), "payload")
    return spb.ClientCommand(barge_in=_barge_in_signal(payload.get("source"), "payload.source"))


def playback_ack(event: Event) -> spb.ClientCommand:
    ack = spb.PlaybackAck(
        response_id=fields.non_empty_string(fields.required(event, "response_id"), "response_id"),
        played_ms=fields.non_negative_int(fields.required(event, "played_ms"), "played_ms"),
    )
    if event.get("item_id") is not None:
        ack.item_id = fields.non_empty_string(event["item_id"], "item_id")
    if event.get("committed_ms") is not None:
        ack.committed_ms = fields.non_negative_int(event["committed_ms"], "committed_ms")
        if ack.committed_ms > ack.played_ms:
            raise ClientError(
                "invalid_value",
                "`committed_ms` cannot exceed `played_ms`: only played audio can be committed",
                param="committed_ms",
            )
    if event.get("truncate") is not None:
        ack.truncate = fields.boolean(event["truncate"], "truncate")
    return spb.ClientCommand(playback_ack=ack)


def within_append_limit(cmd: spb.ClientCommand, max_bytes: int) -> spb.ClientCommand:
    """`cmd`, unless it is an append of more audio than `max_bytes`.

    Counted on the decoded audio, as OpenAI counts it (G.711 counts as the
    PCM16 it becomes: that is what crosses to the session).
    """
    if cmd.WhichOneof("kind") == "append_audio" and len(cmd.append_audio.pcm16) > max_bytes:
        raise ClientError(
            "audio_too_large",
            f"an append may carry at most {max_bytes} bytes of audio",
            param="audio",
        )
    return cmd
