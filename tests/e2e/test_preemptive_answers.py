"""Preemptive answers on the real stack, asked as a user asks: a live microphone.

At the user's first pause the server asks for the answer and holds it; the
turn's end uses it, speech resuming drops it (services/session/antiphon/
session/assistant/preemption.py). Judged here from the client's side and the
services' counters:

- a question with a mid-sentence pause shorter than server_vad's silence
  gets exactly one answer, to the whole question, and nothing of an answer
  to its first half ever reaches the client: in OpenAI's dialect (every
  frame judged by the `openai` SDK's strict models) and in the duplex one;
  with a pause long enough, that first answer surely started and was dropped;
- a plain question's first audio is the preemptive answer's (the counters
  say it was used), its transcript is the one ASR pass the pause made, and
  its words are those the same question gets without preemption (push to
  talk, greedy decoding);
- the answer's audio has no gap at its first join a listener would hear.
"""

from __future__ import annotations

import asyncio
import base64
import time
from typing import Any

import pytest
from stack import LocalStack

from antiphon.client import Microphone
from bench.lib.prometheus import scrape
from tests.support.realtime import Event, RealtimeClient, duplex_url, of_type
from tests.support.speech import Voice, spoken, spoken_paused

pytestmark = [pytest.mark.stack, pytest.mark.models]

RATE = 24000
QUESTION = "What is the capital of France?"
SESSION: dict[str, Any] = {
    "type": "realtime",
    "audio": {"input": {"format": {"type": "audio/pcm"}}},
}
# Longest silence a listener may meet where the first phrase joins the next.
MAX_FIRST_JOIN_GAP_MS = 150


class Answered:
    """One live question's events, with the arrival time of each audio delta."""

    def __init__(
        self, events: list[Event], audio_at: list[tuple[float, int]], counted: dict[str, float]
    ) -> None:
        self.events = events
        # (client clock, milliseconds of audio) per output audio delta.
        self.audio_at = audio_at
        # What the preemptive counters counted meanwhile (`_outcomes`).
        self.counted = counted

    @property
    def transcript(self) -> str:
        (heard,) = of_type(self.events, "conversation.item.input_audio_transcription.completed")
        return str(heard["transcript"])

    @property
    def answer(self) -> str:
        (done,) = of_type(self.events, "response.output_audio_transcript.done")
        return str(done["transcript"])

    def first_join_gap_ms(self) -> float:
        """Silence at the first join: where audio that came later than the first
        phrase's (a burst of deltas) starts, against the end of what had played."""
        (first_at, first_ms), *rest = self.audio_at
        played_until = first_at + first_ms / 1000
        burst_end = first_at
        for at, ms in rest:
            if at - burst_end > 0.02:
                return max(0.0, at - played_until) * 1000
            burst_end = at
            played_until += ms / 1000
        return 0.0  # the whole answer came in one burst


async def _ask(
    stack: LocalStack,
    speech: bytes,
    *,
    url: str,
    session: dict[str, Any],
    rate: int = RATE,
    push_to_talk: bool = False,
) -> Answered:
    before = await asyncio.to_thread(_counts, stack)
    client = await RealtimeClient.connect(url)
    audio_at: list[tuple[float, int]] = []

    def timed(event: Event) -> bool:
        if event["type"] == "response.output_audio.delta":
            audio_at.append((time.monotonic(), len(base64.b64decode(event["delta"])) // 48))
        return event["type"] == "response.done"

    try:
        created = await client.open(**session)
        assert created["type"] == "session.created", created
        async with Microphone(client, rate) as mic:
            await asyncio.sleep(0.6)  # the microphone is live before the user speaks
            await mic.say(speech)
            if push_to_talk:
                await client.send("input_audio_buffer.commit")
                await client.send("response.create")
            await client.until(timed, timeout=180)
            # Live silence goes on a little: a late preemptive answer would show now.
            await asyncio.sleep(1.0)
    finally:
        await client.close()
    assert not of_type(client.events, "error"), of_type(client.events, "error")
    counted = _outcomes(before, await asyncio.to_thread(_counts, stack))
    return Answered(client.events, audio_at, counted)


def _counts(stack: LocalStack) -> dict[str, float]:
    return scrape([stack.ports.session_metrics, stack.ports.stage0_metrics])


PREEMPTIVE = "antiphon_session_preemptive_answers_total"
PAUSES = "antiphon_stage0_utterance_pauses_total"


def _outcomes(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """What the preemptive counters counted in between, as `preemptive:used`, `pauses:ended`..."""
    out = {}
    for name, short in ((PREEMPTIVE, "preemptive"), (PAUSES, "pauses")):
        for key, value in after.items():
            if key.startswith(name + '{outcome="'):
                if moved := value - before.get(key, 0.0):
                    out[f"{short}:{key[len(name) + 10 : -2]}"] = moved
    return out


def _response_ids(value: Any, into: set[str]) -> None:
    """Every response id `value` names, at any depth (the duplex dialect nests refs)."""
    if isinstance(value, dict):
        for key, inner in value.items():
            if key == "response_id" and inner:
                into.add(inner)
            elif key == "response" and isinstance(inner, dict) and inner.get("id"):
                into.add(inner["id"])
            _response_ids(inner, into)
    elif isinstance(value, list):
        for inner in value:
            _response_ids(inner, into)


def _one_response(answered: Answered) -> str:
    """The one response's id; every event naming a response names it."""
    (created,) = of_type(answered.events, "response.created")
    rid = str(created["response"]["id"])
    named: set[str] = set()
    for event in answered.events:
        _response_ids(event, named)
    assert named == {rid}, named
    assert len(of_type(answered.events, "response.done")) == 1
    return rid


def _url(stack: LocalStack, dialect: str) -> str:
    port = stack.ports.gateway
    return duplex_url(port) if dialect == "duplex" else f"ws://127.0.0.1:{port}/v1/realtime"


def _one_answer_to_the_whole_question(answered: Answered) -> None:
    _one_response(answered)
    # One turn, heard whole: the pause ended no turn.
    assert len(of_type(answered.events, "input_audio_buffer.speech_stopped")) == 1
    assert {"capital", "france"} <= set(answered.transcript.lower().replace("?", "").split())
    assert "paris" in answered.answer.lower(), answered.answer


@pytest.mark.parametrize(("dialect", "voice"), [("openai", "espeak"), ("duplex", "piper")])
async def test_a_hesitation_under_the_silence_gets_one_answer_to_the_whole_question(
    model_stack: LocalStack, dialect: str, voice: Voice
) -> None:
    """ "What is the capital ... of France?" with 350 ms between, under server_vad's
    500. Whether the pause's answer starts before speech resumes depends on
    how soon its ASR pass ends (the audio comes 200 ms at a time): either way
    it is never seen, and every one started is used or dropped."""
    answered = await _ask(
        model_stack,
        spoken_paused(QUESTION, 4, 350, RATE, voice),
        url=_url(model_stack, dialect),
        session=SESSION,
    )
    counted = answered.counted
    _one_answer_to_the_whole_question(answered)
    assert counted.get("preemptive:used") == 1, counted
    dropped = counted.get("preemptive:speech_resumed", 0)
    assert counted["preemptive:started"] == 1 + dropped, counted


@pytest.mark.parametrize(("dialect", "voice"), [("openai", "piper"), ("duplex", "espeak")])
async def test_an_answer_started_at_a_pause_is_dropped_when_speech_resumes(
    model_stack: LocalStack, dialect: str, voice: Voice
) -> None:
    """A hesitation long enough that the pause's answer surely starts (600 ms,
    under a 1 s silence the client chose): it is dropped, never seen, and the
    whole question gets the one answer."""
    session = {
        "type": "realtime",
        "audio": {
            "input": {
                "format": {"type": "audio/pcm"},
                "turn_detection": {"type": "server_vad", "silence_duration_ms": 1000},
            }
        },
    }
    answered = await _ask(
        model_stack,
        spoken_paused(QUESTION, 4, 600, RATE, voice),
        url=_url(model_stack, dialect),
        session=session,
    )
    counted = answered.counted
    _one_answer_to_the_whole_question(answered)
    assert counted.get("pauses:resumed") == 1, counted
    assert counted.get("preemptive:speech_resumed") == 1, counted
    assert counted.get("preemptive:used") == 1, counted
    assert counted["preemptive:started"] == 2, counted


def _lane_session(lane: str, rate: int) -> dict[str, Any]:
    audio_in: dict[str, Any] = {"format": {"type": "audio/pcm", "rate": rate}}
    if lane == "semantic_vad":
        audio_in["turn_detection"] = {"type": "semantic_vad"}
    elif lane in ("manual", "native"):
        audio_in["turn_detection"] = None
    session: dict[str, Any] = {"type": "realtime", "audio": {"input": audio_in}}
    if lane == "native":
        session["extra_body"] = {"native_duplex": True}
    return session


@pytest.mark.parametrize(
    ("lane", "voice", "rate"),
    [
        ("server_vad", "espeak", 24000),
        ("server_vad", "piper", 16000),
        ("semantic_vad", "espeak", 16000),
        ("native", "piper", 24000),
    ],
)
async def test_a_question_is_answered_from_its_pause_with_the_words_it_gets_without(
    model_stack: LocalStack, lane: str, voice: Voice, rate: int
) -> None:
    speech = spoken(QUESTION, rate, voice)
    url = _url(model_stack, "duplex" if lane == "native" else "openai")
    live = await _ask(model_stack, speech, url=url, session=_lane_session(lane, rate), rate=rate)
    counted = live.counted
    _one_response(live)
    # Its transcript is the pause's: one ASR pass, done before the turn ended.
    assert counted.get("pauses:ended") == 1, counted
    if lane == "semantic_vad":
        # Smart Turn may end the turn before the pause's text is ready: then
        # there is nothing to start early, and the answer starts at once.
        assert counted.get("preemptive:started", 0) == counted.get("preemptive:used", 0), counted
    else:
        # Its first audio was the preemptive answer's.
        assert counted == {
            "preemptive:started": 1,
            "preemptive:used": 1,
            "pauses:reported": 1,
            "pauses:ended": 1,
        }, counted
    assert live.first_join_gap_ms() <= MAX_FIRST_JOIN_GAP_MS, live.audio_at
    # Push to talk never answers preemptively: the same question, the same words.
    pushed = await _ask(
        model_stack,
        speech,
        url=url,
        session=_lane_session("manual", rate),
        rate=rate,
        push_to_talk=True,
    )
    assert pushed.transcript == live.transcript
    assert pushed.answer == live.answer
