"""A model-native backend's speech, frame by frame, becomes responses.

The session's response control over recording stage links and a real Redis:
the model's talking opens a response (or fills the one `response.create`
made), its going quiet ends it once stage1 has decoded the frames before,
every frame's codes go to stage1, and stale or cancelled speech reaches no
client.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
import redis.asyncio as aioredis

from antiphon.session.actor.journal import Fields
from antiphon.session.assistant.response_control import ResponseControl
from antiphon.session.config import session_config
from antiphon.session.conversation.conversation import Conversation
from antiphon.session.stage.stage_links import StageLinks
from antiphon.session.state.store import SessionStore
from antiphon.v1 import common_pb2 as cpb
from antiphon.v1 import session_pb2 as spb
from antiphon.v1 import stage_pb2
from tests.support.bindings import Recording, recording_links
from tests.support.parts import response_control
from tests.support.redis_dbs import db_url

DB = 14  # this module's own database on the shared test Redis
SPEAK, LISTEN = stage_pb2.DECISION_SPEAK, stage_pb2.DECISION_LISTEN


class Journal:
    def __init__(self) -> None:
        self.events: list[spb.ServerEvent] = []

    async def commit(
        self,
        session_id: str,
        token: str,
        events: list[tuple[int, bytes]],
        fields: Fields | None = None,
    ) -> None:
        self.events += [spb.ServerEvent.FromString(payload) for _, payload in events]

    @property
    def kinds(self) -> list[str]:
        return [e.WhichOneof("kind") or "" for e in self.events]


@dataclass
class Parts:
    responses: ResponseControl
    links: StageLinks
    stage1: Recording
    journal: Journal
    conversation: Conversation
    config: cpb.SessionConfig


@pytest.fixture
async def parts(redis_url: str) -> AsyncIterator[Parts]:
    client = aioredis.from_url(db_url(redis_url, DB))
    await client.flushdb()
    store = SessionStore(
        client, lease_ms=5000, journal_max_bytes=1 << 20, journal_ttl_s=60.0, ops_cache_size=4
    )
    await store.open("sess_m", "own_m", {"state": "open"})
    conversation = Conversation(store, "sess_m", "own_m")
    journal = Journal()
    config = session_config.defaults()
    links, _, stage1 = recording_links("sess_m")
    # What a `moshi` stage0 worker says of itself.
    links._info["stage0"] = stage_pb2.StageInfo(
        capabilities=cpb.Capabilities(model_native=True, input_sample_rate_hz=24000)
    )
    responses = response_control(
        session_id="sess_m",
        owner_token="own_m",
        config=config,
        journal=journal,
        links=links,
        conversation=conversation,
    )
    try:
        yield Parts(responses, links, stage1, journal, conversation, config)
    finally:
        await client.aclose()


def frame(
    index: int, decision: stage_pb2.Decision, text: str = "", epoch: int = 1
) -> stage_pb2.ModelFrame:
    return stage_pb2.ModelFrame(
        epoch=epoch, index=index, text=text, codes=[index] * 8, decision=decision
    )


def decoded(stage1: Recording) -> list[tuple[int, str, str]]:
    """(frame index, response id, text) of every frame sent to stage1 for decoding."""
    return [
        (r.frame.index, r.frame.response_id, r.frame.text)
        for r in stage1.sent
        if r.WhichOneof("kind") == "frame"
    ]


async def audio(p: Parts, rid: str, text: str) -> None:
    await p.responses.on_audio(
        stage_pb2.AudioChunk(
            epoch=1,
            response_id=rid,
            pcm16=b"\x00\x00" * 1920,
            sample_rate_hz=24000,
            text=text,
            duration_ms=80,
        )
    )


async def test_the_models_speech_is_one_response_from_its_first_word_to_its_quiet(
    parts: Parts,
) -> None:
    p = parts
    await p.responses.on_model_frame(frame(0, LISTEN))
    assert p.responses.active is None and p.journal.kinds == []
    await p.responses.on_model_frame(frame(1, SPEAK, " Hello"))
    r = p.responses.active
    assert r is not None
    assert p.journal.kinds[0] == "response_created"
    assert "response_speak" in p.journal.kinds
    await p.responses.on_model_frame(frame(2, SPEAK, " there"))
    await audio(p, r.id, " Hello")
    await audio(p, r.id, " there")
    await p.responses.on_model_frame(frame(3, LISTEN))
    # Quiet: stage1 is told the response's audio ends after the frames before.
    final = [x.text for x in p.stage1.sent if x.WhichOneof("kind") == "text"]
    assert [(t.response_id, t.final) for t in final] == [(r.id, True)]
    assert "response_done" not in p.journal.kinds
    await p.responses.on_speech_done(stage_pb2.SynthesisDone(epoch=1, response_id=r.id))
    kinds = p.journal.kinds
    assert kinds.count("response_done") == 1
    assert kinds.index("response_done") < kinds.index("response_listen")
    done = next(e for e in p.journal.events if e.HasField("response_done")).response_done
    assert done.response.status == "completed"
    assert done.response.output[0].content[0].transcript == " Hello there"
    # Every frame went to stage1; only the talking ones for the response.
    assert decoded(p.stage1) == [
        (0, "", ""),
        (1, r.id, " Hello"),
        (2, r.id, " there"),
        (3, "", ""),
    ]
    [item] = await p.conversation.items()
    assert item.content[0].transcript == " Hello there"


async def test_speech_that_comes_while_the_last_answer_is_decoded_opens_the_next(
    parts: Parts,
) -> None:
    p = parts
    await p.responses.on_model_frame(frame(0, SPEAK, " One"))
    first = p.responses.active
    assert first is not None
    await p.responses.on_model_frame(frame(1, LISTEN))
    # The model talks again before stage1 said the first answer's audio is done.
    await p.responses.on_model_frame(frame(2, SPEAK, " Two"))
    assert p.responses.active == first
    assert [i for i, _, _ in decoded(p.stage1)] == [0, 1]
    await p.responses.on_speech_done(stage_pb2.SynthesisDone(epoch=1, response_id=first.id))
    second = p.responses.active
    assert second is not None and second.id != first.id
    assert decoded(p.stage1)[-1] == (2, second.id, " Two")
    assert p.journal.kinds.count("response_created") == 2


async def test_a_turn_the_model_ends_in_a_spoken_frame_ends_its_response_there(
    parts: Parts,
) -> None:
    """MiniCPM-o closes its turn inside a unit it speaks (`<|turn_eos|>`) and
    may speak again at once: that next unit is a new turn's response."""
    p = parts
    await p.responses.on_model_frame(frame(0, SPEAK, " One"))
    first = p.responses.active
    assert first is not None
    ended = frame(1, SPEAK, " done.")
    ended.turn_ended = True
    await p.responses.on_model_frame(ended)
    final = [x.text for x in p.stage1.sent if x.WhichOneof("kind") == "text"]
    assert [(t.response_id, t.final) for t in final] == [(first.id, True)]
    await p.responses.on_model_frame(frame(2, SPEAK, " Two"))
    assert p.responses.active == first  # held until stage1 has spoken the turn
    await audio(p, first.id, " One")
    await audio(p, first.id, " done.")
    await p.responses.on_speech_done(stage_pb2.SynthesisDone(epoch=1, response_id=first.id))
    second = p.responses.active
    assert second is not None and second.id != first.id
    assert decoded(p.stage1) == [
        (0, first.id, " One"),
        (1, first.id, " done."),
        (2, second.id, " Two"),
    ]
    done = next(e for e in p.journal.events if e.HasField("response_done")).response_done
    assert (done.response.status, done.response.output[0].content[0].transcript) == (
        "completed",
        " One done.",
    )


async def test_response_create_takes_the_models_next_speech_and_asks_stage0_nothing(
    parts: Parts,
) -> None:
    p = parts
    await p.responses.create(spb.CreateResponse())
    r = p.responses.active
    assert r is not None
    s0 = p.links._bindings["stage0"]
    assert isinstance(s0, Recording)
    assert not [x for x in s0.sent if x.WhichOneof("kind") == "generate"]
    await p.responses.on_model_frame(frame(0, LISTEN))
    assert p.responses.active == r
    await p.responses.on_model_frame(frame(1, SPEAK, " Yes"))
    assert p.responses.active == r
    assert decoded(p.stage1)[-1] == (1, r.id, " Yes")


async def test_cancelled_and_stale_speech_reaches_no_client(parts: Parts) -> None:
    p = parts
    await p.responses.on_model_frame(frame(0, SPEAK, " Long"))
    r = p.responses.active
    assert r is not None
    await p.responses.cancel("")
    assert p.links.epoch == 2
    done = next(e for e in p.journal.events if e.HasField("response_done")).response_done
    assert done.response.status == "cancelled"
    before = list(p.journal.kinds)
    # Frames stage0 stepped before it heard the cancel carry the old epoch.
    await p.responses.on_model_frame(frame(1, SPEAK, " story", epoch=1))
    assert p.responses.active is None and p.journal.kinds == before
    assert decoded(p.stage1)[-1] == (1, "", "")


async def test_a_text_only_session_hears_the_models_words_as_text(parts: Parts) -> None:
    p = parts
    p.config.output_modalities[:] = ["text"]
    await p.responses.on_model_frame(frame(0, SPEAK, " Hi"))
    await p.responses.on_model_frame(frame(1, SPEAK, " you"))
    await p.responses.on_model_frame(frame(2, LISTEN))
    kinds = p.journal.kinds
    assert kinds.count("text_delta") == 2 and "response_done" in kinds
    # Its audio is decoded for nobody (the decoder's state runs on).
    assert [rid for _, rid, _ in decoded(p.stage1)] == ["", "", ""]
