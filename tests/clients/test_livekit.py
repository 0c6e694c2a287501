"""LiveKit Agents' OpenAI realtime plugin holds a spoken conversation with the stack.

`RealtimeModel(base_url=...)` with stock options (semantic_vad, its voice and
transcription model; only the URL and a dummy key are ours) and the
`RealtimeSession` it makes, without a LiveKit room: a question spoken into a
live microphone, heard and answered; `generate_reply()` answered (LiveKit
waits for `response.created` to echo its `metadata.client_event_id`); a
user message added by `update_chat_ctx`, whose reply `interrupt()` cuts
off. No error reaches LiveKit's event emitter or its log.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.clients.harness import (
    Utterance,
    drive,
    heard,
    no_errors,
    responses,
    says,
    scenario_ok,
)

pytestmark = [pytest.mark.stack, pytest.mark.models]

QUESTION = Utterance("What color is the sky on a sunny day?", "espeak", frozenset({"sky", "sunny"}))


@pytest.fixture(scope="module")
def record(gateway_url: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return drive("drive_livekit.py", gateway_url, QUESTION, None, tmp_path_factory.mktemp("lk"))


def test_no_error_reaches_livekits_emitter_and_no_error_frame_is_sent(
    record: dict[str, Any],
) -> None:
    no_errors(record)


def test_the_whole_conversation_runs(record: dict[str, Any]) -> None:
    """Spoken turn, generate_reply(), a chat context update and an interrupted reply."""
    scenario_ok(record)


def test_the_spoken_question_is_heard_and_answered_with_audio(record: dict[str, Any]) -> None:
    assert heard(record, QUESTION), record["user_transcripts"]
    # LiveKit's own transcription event carries it too.
    assert says(record["facts"]["livekit_transcripts"], QUESTION), record["facts"]
    first = responses(record)[0]
    assert first["status"] == "completed", first
    assert record["facts"]["audio_bytes"].get(first["id"], 0) > 0, record["facts"]


def test_generate_reply_resolves_and_is_answered_with_audio(record: dict[str, Any]) -> None:
    """The future resolves on the echoed `metadata.client_event_id` (user_initiated)."""
    rs = responses(record)
    assert len(rs) >= 2, record["steps"]
    assert "generate_reply" in rs[1]["notes"]
    assert record["facts"]["user_initiated"].get(rs[1]["id"]) is True
    assert rs[1]["status"] == "completed", rs[1]
    assert record["facts"]["audio_bytes"].get(rs[1]["id"], 0) > 0


def test_a_chat_context_update_is_answered_and_interrupt_cancels_the_reply(
    record: dict[str, Any],
) -> None:
    """`update_chat_ctx` (`conversation.item.create`, awaited until the server
    adds the item) and `generate_reply()`; `interrupt()` sends `response.cancel`
    and the reply ends `cancelled` (`client_cancelled`)."""
    rs = responses(record)
    assert len(rs) >= 3, record["steps"]
    sent = record["client_events"]
    assert "conversation.item.create" in sent and sent[-1] == "response.cancel", sent
    assert (rs[2]["status"], rs[2]["reason"]) == ("cancelled", "client_cancelled"), rs[2]
