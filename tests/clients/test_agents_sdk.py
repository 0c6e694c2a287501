"""The OpenAI Agents SDK (`openai-agents`) holds a spoken conversation with the stack.

Its `RealtimeRunner` with stock model settings (semantic_vad, the SDK's
voice and transcription model; only the URL and a dummy key are ours), fed
by a live microphone: a spoken question heard and answered, a second
`response.create` (a text turn) cancelled by the SDK's interrupt, and a
reply cut off by the user speaking over it. The SDK validates every server
frame with the `openai` SDK's types; a frame that fails is an error here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.clients.harness import Utterance, drive, heard, no_errors, responses, scenario_ok

pytestmark = [pytest.mark.stack, pytest.mark.models]

QUESTION = Utterance("What is the capital of France?", "piper", frozenset({"capital", "france"}))
# One sentence: a pause inside it could end a turn there (semantic_vad), and
# the rest would then cut off the answer to the first part.
INTERRUPTION = Utterance(
    "What color is the sky on a sunny day?", "espeak", frozenset({"sky", "sunny"})
)


@pytest.fixture(scope="module")
def record(gateway_url: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp: Path = tmp_path_factory.mktemp("agents-sdk")
    return drive("drive_agents.py", gateway_url, QUESTION, INTERRUPTION, tmp)


def test_no_frame_fails_the_sdks_validation_and_no_error_is_surfaced(
    record: dict[str, Any],
) -> None:
    no_errors(record)


def test_the_whole_conversation_runs(record: dict[str, Any]) -> None:
    """Spoken turn, interrupted second turn, barge-in, and the barge-in's own answer."""
    scenario_ok(record)


def test_the_spoken_question_is_heard_and_answered_with_audio(record: dict[str, Any]) -> None:
    assert heard(record, QUESTION), record["user_transcripts"]
    first = responses(record)[0]
    assert first["status"] == "completed", first
    assert first["audio_bytes"] > 0
    # The SDK itself saw the response start and handed its audio to the app.
    assert record["facts"]["turns_started"][:1] == [first["id"]]
    assert record["facts"]["audio_bytes"] > 0


def test_a_second_response_create_is_sent_and_the_interrupt_cancels_it(
    record: dict[str, Any],
) -> None:
    """`send_message` -> the SDK's own `response.create`; its interrupt ->
    `response.cancel`: the reply ends `cancelled` (`client_cancelled`)."""
    rs = responses(record)
    assert len(rs) >= 2, record["steps"]
    assert (rs[1]["status"], rs[1]["reason"]) == ("cancelled", "client_cancelled"), rs[1]
    assert rs[1]["id"] in record["facts"]["turns_ended"]


def test_speaking_over_a_reply_cancels_it_and_is_answered(record: dict[str, Any]) -> None:
    """semantic_vad with `interrupt_response` (the SDK's default): speech over
    the reply ends it `cancelled` (`turn_detected`); the SDK stops its audio
    and the interruption is answered as its own turn."""
    rs = responses(record)
    assert len(rs) >= 4, record["steps"]
    assert (rs[2]["status"], rs[2]["reason"]) == ("cancelled", "turn_detected"), rs[2]
    assert record["facts"]["audio_interrupted_by_speech"] >= 1, record["facts"]
    assert heard(record, INTERRUPTION), record["user_transcripts"]
    answers = [r for r in rs[3:] if r["status"] == "completed"]
    assert answers and answers[0]["audio_bytes"] > 0, rs[3:]
