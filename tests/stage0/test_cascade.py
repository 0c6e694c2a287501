"""A stage0 cascade session hears what its VAD segmented, however late the commit comes.

The session service commits a server_vad turn only after stage0's
`speech_stopped` has travelled to it and back. Meanwhile live audio keeps
arriving, so these tests feed audio the way a microphone does (200 ms at a
time, then silence) and commit only after more silence was heard. Each
chunk is fed once the VAD and the end-of-turn model have answered for the
one before (as a live caller's 200 ms apart would find them).
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Generic, TypeVar

import numpy as np
import pytest
from prometheus_client import CollectorRegistry

from antiphon.stage0.assets import Stage0Assets
from antiphon.stage0.backends.cascade.asr.asr import WhisperAsr
from antiphon.stage0.backends.cascade.asr.asr_batch import BatchedAsr
from antiphon.stage0.backends.cascade.listening.turn import SmartTurn, TurnBatcher
from antiphon.stage0.backends.cascade.listening.vad import SileroVad, VadBatcher
from antiphon.stage0.backends.cascade.models import (
    PooledWhisper,
    TextGenerator,
    Transcriber,
    load_asr,
)
from antiphon.stage0.backends.cascade.session import CascadeSession
from antiphon.stage0.backends.synthetic.engines import ScriptedLlm
from antiphon.stage0.metrics import Stage0Metrics
from antiphon.stage0.settings import Stage0Settings
from antiphon.v1 import common_pb2 as cpb
from antiphon.v1 import stage_pb2 as pb
from tests.support.speech import VOICES, Voice, spoken, spoken_paused

CHUNK = 6400  # 200 ms of PCM16 at 16 kHz
SILENCE = b"\x00" * CHUNK
T = TypeVar("T")


class Seen(Generic[T]):
    """What a session gave out, in order, and a wait for the first that matches."""

    def __init__(self) -> None:
        self.items: list[T] = []
        self._changed = asyncio.Event()

    def append(self, item: T) -> None:
        self.items.append(item)
        self._changed.set()

    def clear(self) -> None:
        self.items.clear()

    def __iter__(self) -> Iterator[T]:
        return iter(list(self.items))

    async def first(self, found: Callable[[T], bool], timeout_s: float = 30) -> T:
        async with asyncio.timeout(timeout_s):
            while True:
                for item in self.items:
                    if found(item):
                        return item
                self._changed.clear()
                await self._changed.wait()


class _Preparing(ScriptedLlm):
    """An LLM that is only told of the messages to make ready (these tests never generate)."""

    def __init__(self, prepared: Seen[tuple[str, str]]) -> None:
        super().__init__(ttft_ms=0, token_ms=0)
        self._prepared = prepared

    def prepare(self, role: str, content: str) -> None:
        self._prepared.append((role, content))


@dataclass
class Hearing:
    """The engines a listening session uses: the real VAD, Smart Turn and Whisper, no LLM."""

    vad: SileroVad
    turn: SmartTurn
    asr: Transcriber
    # Smart Turn's calls.
    executor: ThreadPoolExecutor
    # What sessions asked the LLM to make ready for their next prompts (each
    # test that looks sets a fresh one: it waits on the test's event loop).
    prepared: Seen[tuple[str, str]] = field(default_factory=Seen)

    @property
    def llm(self) -> TextGenerator:
        return _Preparing(self.prepared)

    async def transcribe(self, pcm16: bytes) -> str:
        return await self.asr.transcribe(pcm16)

    async def close(self) -> None:
        await self.asr.close()
        self.executor.shutdown()


@pytest.fixture(scope="module")
def hearing(assets: Stage0Assets) -> Hearing:
    return Hearing(
        SileroVad(assets.vad_onnx, threads=1),
        SmartTurn(assets.turn.onnx, assets.turn.features, threads=1),
        PooledWhisper(WhisperAsr(assets.whisper_dir, threads=1), workers=1),
        ThreadPoolExecutor(1),
    )


Events = Seen[pb.Stage0Event]


@pytest.fixture
async def events() -> Events:
    return Seen()


@dataclass
class Listening:
    """A cascade session, and the batchers its VAD and end-of-turn model run in."""

    session: CascadeSession
    vad: VadBatcher
    turn: TurnBatcher

    def handle(self, req: pb.Stage0Request) -> None:
        self.session.handle(req)

    async def feed(self, pcm16: bytes) -> None:
        """Audio as a microphone sends it, each chunk once the VAD has run all
        audio before it and the end-of-turn model answered what it was asked."""
        for i in range(0, len(pcm16), CHUNK):
            chunk = pcm16[i : i + CHUNK]
            self.handle(pb.Stage0Request(audio=pb.Stage0Audio(pcm16=chunk + SILENCE[len(chunk) :])))
            async with asyncio.timeout(10):
                await self.vad.idle()
                await self.turn.idle()

    async def close(self) -> None:
        await self.session.close()


def _session(
    hearing: Hearing,
    events: Events,
    lane: pb.Lane,
    td: cpb.TurnDetection | None = None,
) -> Listening:
    vad = VadBatcher(hearing.vad)
    turn = TurnBatcher(hearing.turn, executor=hearing.executor)
    session = CascadeSession(
        hearing, Stage0Settings(), events.append, Stage0Metrics(CollectorRegistry()), vad, turn
    )
    td = td or cpb.TurnDetection(mode=cpb.TURN_DETECTION_MODE_SERVER_VAD)
    session.handle(
        pb.Stage0Request(open=pb.Stage0Open(session_id="s", lane=lane, turn_detection=td))
    )
    return Listening(session, vad, turn)


def _kinds(events: Events) -> list[str]:
    return [str(e.WhichOneof("kind")) for e in events]


async def _transcript(events: Events) -> pb.Transcript:
    return (await events.first(lambda e: e.HasField("transcript"))).transcript


@pytest.mark.models
@pytest.mark.parametrize("voice", VOICES)
@pytest.mark.parametrize("late_ms", [0, 600, 2000])
async def test_server_vad_commit_after_speech_stopped_hears_the_utterance(
    hearing: Hearing, events: Events, late_ms: int, voice: Voice
) -> None:
    """The commit that follows `speech_stopped` transcribes the speech, even when
    more live silence arrived in between (the audio is never trimmed away);
    the transcript is made ready for the prompt of the turn it starts."""
    hearing.prepared = Seen()
    session = _session(hearing, events, pb.LANE_SERVER_VAD)
    try:
        question = spoken("What color is the sky on a sunny day?", 16000, voice)
        await session.feed(SILENCE * 2 + question)
        for _ in range(30):
            if "speech_stopped" in _kinds(events):
                break
            await session.feed(SILENCE)
        (stopped,) = [e.speech_stopped for e in events if e.HasField("speech_stopped")]
        # The spoken span alone: no padding, no closing silence, within the fixture.
        assert 1000 < stopped.speech_ms <= len(question) // 32, stopped
        await session.feed(SILENCE * (late_ms // 200))
        session.handle(pb.Stage0Request(commit=pb.Stage0Commit(item_id="item_1")))
        heard = await _transcript(events)
        assert heard.item_id == "item_1"
        assert "sky" in heard.text.lower() and "sunny" in heard.text.lower(), heard.text
        await hearing.prepared.first(lambda _prepared: True)
        assert hearing.prepared.items == [("user", heard.text.strip())]
    finally:
        await session.close()


@pytest.mark.models
async def test_a_worker_on_torch_whisper_hears_through_the_shared_batches(
    hearing: Hearing, events: Events, assets: Stage0Assets
) -> None:
    """`asr_engine: torch`, as a GPU worker runs it (here on the CPU): the
    commit's transcript, and the partial passes while the user spoke, come
    through the worker's shared batches."""
    sizes: list[int] = []
    asr = load_asr(Stage0Settings(asr_engine="torch"), assets.whisper_dir, sizes.append)
    assert isinstance(asr, BatchedAsr)
    batched = dataclasses.replace(hearing, asr=asr, prepared=Seen())
    session = _session(batched, events, pb.LANE_SERVER_VAD)
    try:
        await session.feed(SILENCE * 2 + spoken("What color is the sky on a sunny day?", 16000))
        for _ in range(30):
            if "speech_stopped" in _kinds(events):
                break
            await session.feed(SILENCE)
        session.handle(pb.Stage0Request(commit=pb.Stage0Commit(item_id="item_1")))
        heard = await _transcript(events)
        assert {"sky", "sunny"} <= set(re.findall(r"[a-z]+", heard.text.lower())), heard.text
        assert sizes and sum(sizes) >= 1
    finally:
        await session.close()
        await asr.close()


async def _greeted(hearing: Hearing, events: Events, say: Callable[[str], bytes]) -> Listening:
    """A server_vad session whose VAD has ended a first utterance, not yet committed."""
    session = _session(hearing, events, pb.LANE_SERVER_VAD)
    await session.feed(say("Good morning to you.") + SILENCE * 5)
    assert "speech_stopped" in _kinds(events)
    return session


@pytest.mark.models
async def test_server_vad_commit_takes_only_the_segmented_utterance(
    hearing: Hearing, events: Events, say: Callable[[str], bytes]
) -> None:
    """Speech that starts before the commit of the one before it belongs to the next turn."""
    session = await _greeted(hearing, events, say)
    try:
        await session.feed(say("Tell me about the weather tomorrow."))
        session.handle(pb.Stage0Request(commit=pb.Stage0Commit(item_id="first")))
        first = await _transcript(events)
        assert "morning" in first.text.lower() and "weather" not in first.text.lower(), first.text
        events.clear()
        await session.feed(SILENCE * 5)
        session.handle(pb.Stage0Request(commit=pb.Stage0Commit(item_id="second")))
        second = await _transcript(events)
        assert second.item_id == "second" and "weather" in second.text.lower(), second.text
    finally:
        await session.close()


@pytest.mark.models
async def test_cleared_input_drops_a_segmented_utterance(
    hearing: Hearing, events: Events, say: Callable[[str], bytes]
) -> None:
    """A short overlap the session dropped (it clears the input) is never a later turn."""
    session = await _greeted(hearing, events, say)
    try:
        session.handle(pb.Stage0Request(clear_input=pb.Stage0ClearInput()))
        await session.feed(say("Tell me about the weather tomorrow.") + SILENCE * 5)
        session.handle(pb.Stage0Request(commit=pb.Stage0Commit(item_id="only")))
        heard = await _transcript(events)
        assert "weather" in heard.text.lower() and "morning" not in heard.text.lower(), heard.text
    finally:
        await session.close()


def _stopped_ms(events: Events) -> list[int]:
    return [
        e.speech_stopped.audio_end_ms for e in events if e.WhichOneof("kind") == "speech_stopped"
    ]


def _speech_end_ms(pcm16: bytes) -> int:
    samples = np.abs(np.frombuffer(pcm16, dtype="<i2").astype(np.int32))
    return int(np.nonzero(samples > 300)[0][-1]) // 16


SEMANTIC = cpb.TurnDetection(mode=cpb.TURN_DETECTION_MODE_SEMANTIC_VAD, eagerness="auto")


@pytest.mark.models
async def test_semantic_vad_ends_a_complete_question_sooner_than_server_vad_would(
    hearing: Hearing, events: Events
) -> None:
    """Smart Turn hears a finished question: the turn ends well inside server_vad's
    500 ms of silence, and the commit that follows transcribes it whole."""
    question = SILENCE * 2 + spoken("What is the capital of France?", 16000, "piper")
    session = _session(hearing, events, pb.LANE_SERVER_VAD, SEMANTIC)
    try:
        await session.feed(question)
        for _ in range(10):
            await session.feed(SILENCE)
            if _stopped_ms(events):
                break
        (stopped,) = _stopped_ms(events)
        assert stopped - _speech_end_ms(question) < 500
        session.handle(pb.Stage0Request(commit=pb.Stage0Commit(item_id="q")))
        heard = await _transcript(events)
        assert "capital" in heard.text.lower() and "france" in heard.text.lower(), heard.text
    finally:
        await session.close()


@pytest.mark.models
async def test_semantic_vad_waits_through_a_mid_sentence_pause(
    hearing: Hearing, events: Events
) -> None:
    """A 700 ms pause after "What I really want is" ends no turn (server_vad's 500 ms
    would): one turn, ended after the last word, holding the whole sentence."""
    text = "What I really want is a quiet place to read."
    sentence = SILENCE * 2 + spoken_paused(text, 5, 700, 16000, "espeak")
    session = _session(hearing, events, pb.LANE_SERVER_VAD, SEMANTIC)
    try:
        await session.feed(sentence)
        for _ in range(25):  # up to auto's 4 s of silence, and more
            await session.feed(SILENCE)
            if _stopped_ms(events):
                break
        (stopped,) = _stopped_ms(events)
        assert stopped >= _speech_end_ms(sentence)
        session.handle(pb.Stage0Request(commit=pb.Stage0Commit(item_id="s")))
        heard = (await _transcript(events)).text.lower()
        assert "want" in heard and "quiet" in heard and "read" in heard, heard
    finally:
        await session.close()
