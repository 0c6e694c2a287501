"""Pipecat's OpenAI Realtime service holds a spoken conversation with the stack.

`OpenAIRealtimeLLMService(base_url=...)` with its stock session properties
(only the URL and a dummy key are ours), in a pipeline with the usual
context aggregators and no transport: the app starts the conversation, the
user asks a question over the bot's greeting, the server's turn detection
cancels the greeting and Pipecat interrupts its pipeline, and the question
is heard and answered. Pipecat parses every frame strictly and treats an
`error` frame as fatal: its receive loop must still be running at the end.
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

QUESTION = Utterance("What is the capital of France?", "piper", frozenset({"capital", "france"}))


@pytest.fixture(scope="module")
def record(gateway_url: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return drive("drive_pipecat.py", gateway_url, QUESTION, None, tmp_path_factory.mktemp("pc"))


def test_no_frame_fails_pipecats_parser_and_no_error_is_surfaced(
    record: dict[str, Any],
) -> None:
    no_errors(record)
    assert record["facts"]["receive_loop_alive"] is True


def test_the_whole_conversation_runs(record: dict[str, Any]) -> None:
    """Session on connect, greeting, the question over it, its answer."""
    scenario_ok(record)


def test_speaking_over_the_greeting_cancels_it_and_interrupts_the_pipeline(
    record: dict[str, Any],
) -> None:
    rs = responses(record)
    assert rs, record["steps"]
    assert (rs[0]["status"], rs[0]["reason"]) == ("cancelled", "turn_detected"), rs[0]
    assert record["facts"]["interruptions"] >= 1


def test_the_question_is_heard_and_answered_with_audio(record: dict[str, Any]) -> None:
    assert heard(record, QUESTION), record["user_transcripts"]
    # Pipecat's TranscriptionFrame carries it up the pipeline.
    assert says(record["facts"]["pipecat_transcripts"], QUESTION), record["facts"]
    rs = responses(record)
    assert len(rs) >= 2, record["steps"]
    assert rs[1]["status"] == "completed" and rs[1]["audio_bytes"] > 0, rs[1]
    assert record["facts"].get("answer_audio_bytes", 0) > 0, record["facts"]
