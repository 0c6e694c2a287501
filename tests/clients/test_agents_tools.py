"""The OpenAI Agents SDK's `function_tool` through the stack, spoken, stock settings.

The agent declares `get_weather`; a spoken weather question is answered with
a call the SDK runs itself, the result it sends back is answered aloud, and a
question that needs no tool is answered aloud with no call. The SDK validates
every server frame with the `openai` SDK's types; a frame that fails is an
error here (tests/clients/drive_agents_tools.py drives it).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.clients.harness import Utterance, drive, heard, no_errors, responses, scenario_ok

pytestmark = [pytest.mark.stack, pytest.mark.models]

WEATHER = Utterance("What is the weather in Paris?", "piper", frozenset({"weather", "paris"}))
NO_TOOL = Utterance("What color is the sky on a sunny day?", "espeak", frozenset({"sky", "sunny"}))


@pytest.fixture(scope="module")
def record(gateway_url: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp: Path = tmp_path_factory.mktemp("agents-tools")
    return drive("drive_agents_tools.py", gateway_url, WEATHER, None, tmp, follow_up=NO_TOOL)


def test_the_conversation_runs_and_no_frame_fails_the_sdks_validation(
    record: dict[str, Any],
) -> None:
    scenario_ok(record)
    no_errors(record)


def test_the_weather_question_is_a_call_the_sdk_runs(record: dict[str, Any]) -> None:
    assert heard(record, WEATHER), record["user_transcripts"]
    facts = record["facts"]
    assert facts["tool_starts"][:1] == ["get_weather"], facts
    (ran,) = facts["tool_ends"][:1]
    assert "paris" in json.loads(ran["arguments"])["city"].lower()
    assert [c.lower() for c in facts["function_ran_with"]][:1] == ["paris"]
    # The response that called said nothing: its only output is the call.
    calling = [r for r in responses(record) if facts["outputs"].get(r["id"]) == ["function_call"]]
    assert calling and calling[0]["status"] == "completed" and calling[0]["audio_bytes"] == 0


def test_the_function_s_result_is_answered_aloud(record: dict[str, Any]) -> None:
    rs = responses(record)
    outputs = record["facts"]["outputs"]
    first_call = next(i for i, r in enumerate(rs) if "function_call" in outputs.get(r["id"], []))
    answer = rs[first_call + 1]
    assert answer["status"] == "completed" and answer["audio_bytes"] > 0, answer
    said = answer["transcript"].lower()
    assert "18" in said or "eighteen" in said or "sunny" in said, said


def test_a_question_that_needs_no_tool_is_answered_without_a_call(
    record: dict[str, Any],
) -> None:
    assert heard(record, NO_TOOL), record["user_transcripts"]
    later = responses(record)[record["facts"]["second_from"] :]
    answers = [r for r in later if r["status"] == "completed" and r["audio_bytes"] > 0]
    assert answers, later
    # An answer about the sky (blue, or clear after the weather it was just told).
    assert "sky" in answers[0]["transcript"].lower(), answers[0]
    assert all("function_call" not in record["facts"]["outputs"].get(r["id"], []) for r in later)
    assert len(record["facts"]["tool_ends"]) == 1
