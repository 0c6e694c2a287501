"""Conversation items: how they are built, cut, and read back into a prompt."""

from __future__ import annotations

from antiphon.v1 import common_pb2 as cpb

MESSAGE_ROLES = ("user", "assistant", "system")


def user_audio_item(item_id: str, transcript: str, extra_text: str = "") -> cpb.Item:
    content = [cpb.ContentPart(type="input_audio", transcript=transcript)]
    if extra_text:
        # `input.text.append` text that joined the spoken turn.
        content.append(cpb.ContentPart(type="input_text", text=extra_text))
    return cpb.Item(id=item_id, type="message", role="user", status="completed", content=content)


def user_text_item(item_id: str, text: str) -> cpb.Item:
    return cpb.Item(
        id=item_id,
        type="message",
        role="user",
        status="completed",
        content=[cpb.ContentPart(type="input_text", text=text)],
    )


def created_item(item: cpb.Item, item_id: str, call_id: str = "") -> cpb.Item:
    """A client-created item as stored: an id, `completed`, audio bytes dropped
    once heard; a `function_call` the client named no `call_id` for gets `call_id`."""
    stored = cpb.Item()
    stored.CopyFrom(item)
    stored.id = item.id or item_id
    stored.status = "completed"
    if stored.type == "function_call" and not stored.call_id:
        stored.call_id = call_id
    for part in stored.content:
        part.ClearField("audio")
        part.sample_rate_hz = 0
    return stored


def needs_transcription(item: cpb.Item) -> bytes:
    """The audio of a created item that came with no transcript, or b""."""
    for part in item.content:
        if part.type == "input_audio" and part.audio and not part.transcript:
            return part.audio
    return b""


def with_transcript(item: cpb.Item, transcript: str) -> cpb.Item:
    """The item with its (spoken) content's transcript replaced: a truncation or an ASR result."""
    cut = cpb.Item()
    cut.CopyFrom(item)
    for part in cut.content:
        if part.type in ("output_audio", "audio", "input_audio"):
            part.transcript = transcript
        elif part.type in ("output_text", "text") and item.role == "assistant":
            part.text = transcript
    return cut


def heard_item(item_id: str, heard: str) -> cpb.Item:
    """An answer cut to what the listener heard of it: the next prompt's version."""
    item = cpb.Item(
        id=item_id,
        type="message",
        role="assistant",
        status="incomplete",
        content=[cpb.ContentPart(type="output_audio")],
    )
    return with_transcript(item, heard)


def prompt_messages(item: cpb.Item) -> list[cpb.ChatMessage]:
    """What the LLM sees of one history item."""
    if item.type == "function_call_output":
        # Stage0 renders calls and results as its model's chat template can.
        return [cpb.ChatMessage(role="tool", content=item.output, tool_call_id=item.call_id)]
    if item.type == "function_call":
        call = cpb.ToolCall(call_id=item.call_id, name=item.name, arguments=item.arguments)
        return [cpb.ChatMessage(role="assistant", tool_calls=[call])]
    text = " ".join(
        (p.text or p.transcript).strip() for p in item.content if (p.text or p.transcript).strip()
    )
    if not text or item.role not in MESSAGE_ROLES:
        return []
    return [cpb.ChatMessage(role=item.role, content=text)]
