"""A cascade session prefills its system prompt when it opens (responder.py
`warm`): the engine is asked, at once, for one token of the prompt that the
session's first answer starts with, up to where the user's words go, so that
answer's TTFT pays only for those words. Again when the instructions change,
never twice for the same, never with `llm_warm_prefix` off; and after each
answer, the next turn's prompt as far as it is known. The scripted LLM records what it was asked;
the VAD and end-of-turn model are the real ones the session holds."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field

import pytest
from prometheus_client import CollectorRegistry

from antiphon.stage0.assets import locate_turn, locate_vad
from antiphon.stage0.backends.cascade.listening.turn import SmartTurn, TurnBatcher
from antiphon.stage0.backends.cascade.listening.vad import SileroVad, VadBatcher
from antiphon.stage0.backends.cascade.llm.generation import Guided, LlmOutput
from antiphon.stage0.backends.cascade.session import CascadeSession
from antiphon.stage0.backends.synthetic.engines import ScriptedLlm
from antiphon.stage0.metrics import Stage0Metrics
from antiphon.stage0.settings import Stage0Settings
from antiphon.v1 import common_pb2 as cpb
from antiphon.v1 import stage_pb2 as pb

pytestmark = pytest.mark.models


@dataclass(frozen=True)
class Asked:
    request_id: str
    prompt: str
    max_tokens: int


class RecordingLlm(ScriptedLlm):
    def __init__(self) -> None:
        super().__init__(ttft_ms=0, token_ms=0)
        self.asked: list[Asked] = []

    async def generate(
        self,
        request_id: str,
        prompt: str,
        *,
        temperature: float,
        max_tokens: int,
        guided: Guided | None = None,
    ) -> AsyncGenerator[LlmOutput, None]:
        self.asked.append(Asked(request_id, prompt, max_tokens))
        async for out in super().generate(
            request_id, prompt, temperature=temperature, max_tokens=max_tokens, guided=guided
        ):
            yield out


@dataclass
class Engines:
    vad: SileroVad
    turn: SmartTurn
    llm: RecordingLlm = field(default_factory=RecordingLlm)

    async def transcribe(self, pcm16: bytes) -> str:
        return ""

    async def close(self) -> None:
        return None


@pytest.fixture(scope="module")
def engines_parts() -> tuple[SileroVad, SmartTurn]:
    turn = locate_turn()
    return SileroVad(locate_vad(), threads=1), SmartTurn(turn.onnx, turn.features, threads=1)


def _session(
    parts: tuple[SileroVad, SmartTurn], **settings: object
) -> tuple[CascadeSession, RecordingLlm, list[pb.Stage0Event]]:
    vad, turn = parts
    engines = Engines(vad, turn)
    metrics = Stage0Metrics(CollectorRegistry())
    events: list[pb.Stage0Event] = []
    session = CascadeSession(
        engines,
        Stage0Settings.model_validate(settings),
        events.append,
        metrics,
        VadBatcher(vad),
        TurnBatcher(turn),
    )
    return session, engines.llm, events


def _open(instructions: str, *, again: bool = False) -> pb.Stage0Request:
    """The session's open, or (`again`) a reconfiguration with these instructions."""
    opened = pb.Stage0Open(session_id="s", lane=pb.LANE_SERVER_VAD, instructions=instructions)
    return pb.Stage0Request(configure=opened) if again else pb.Stage0Request(open=opened)


async def _settle() -> None:
    for _ in range(10):
        await asyncio.sleep(0)


async def test_opening_prefills_the_prompt_its_first_answer_starts_with(
    engines_parts: tuple[SileroVad, SmartTurn],
) -> None:
    session, llm, events = _session(engines_parts)
    session.handle(_open("Answer like a pirate."))
    await _settle()
    (warm,) = llm.asked
    assert warm.max_tokens == 1
    assert "Answer like a pirate." in warm.prompt
    assert events == []  # its token goes nowhere
    session.handle(
        pb.Stage0Request(
            generate=pb.Generate(
                response_id="r1",
                messages=[
                    cpb.ChatMessage(role="system", content="Answer like a pirate."),
                    cpb.ChatMessage(role="user", content="Where is the treasure?"),
                ],
                max_output_tokens=8,
            )
        )
    )
    await _settle()
    answer = llm.asked[1]
    # The whole warm prompt is the answer's start, the user's turn opened in it.
    assert answer.prompt.startswith(warm.prompt)
    assert answer.prompt[len(warm.prompt) :].startswith("Where is the treasure?")
    await session.close()


async def test_after_an_answer_the_next_turn_s_prompt_is_prefilled(
    engines_parts: tuple[SileroVad, SmartTurn],
) -> None:
    session, llm, events = _session(engines_parts)
    session.handle(_open("Answer like a pirate."))
    system = cpb.ChatMessage(role="system", content="Answer like a pirate.")
    asked = cpb.ChatMessage(role="user", content="Where is the treasure?")
    session.handle(
        pb.Stage0Request(
            generate=pb.Generate(response_id="r1", messages=[system, asked], max_output_tokens=8)
        )
    )
    for _ in range(100):
        await _settle()
        if len(llm.asked) == 3:
            break
    _open_warm, answer, ahead = llm.asked
    assert ahead.max_tokens == 1 and ahead.request_id != _open_warm.request_id
    said = "".join(e.delta.text for e in events if e.WhichOneof("kind") == "delta").strip()
    assert said
    assert ahead.prompt.startswith(answer.prompt) and said in ahead.prompt
    # The next turn: the history, the answer as said, and the user's new words.
    session.handle(
        pb.Stage0Request(
            generate=pb.Generate(
                response_id="r2",
                messages=[
                    system,
                    asked,
                    cpb.ChatMessage(role="assistant", content=said),
                    cpb.ChatMessage(role="user", content="And the map?"),
                ],
                max_output_tokens=8,
            )
        )
    )
    await _settle()
    assert llm.asked[3].prompt.startswith(ahead.prompt)
    await session.close()


async def test_the_same_instructions_are_prefilled_once_and_new_ones_again(
    engines_parts: tuple[SileroVad, SmartTurn],
) -> None:
    session, llm, _events = _session(engines_parts)
    session.handle(_open("Be brief."))
    session.handle(_open("Be brief.", again=True))  # a turn-detection change, say
    await _settle()
    assert len(llm.asked) == 1
    session.handle(_open("Be verbose.", again=True))
    await _settle()
    assert [("Be verbose." in a.prompt) for a in llm.asked] == [False, True]
    await session.close()


async def test_with_warming_off_nothing_is_asked_at_open(
    engines_parts: tuple[SileroVad, SmartTurn],
) -> None:
    session, llm, _events = _session(engines_parts, llm_warm_prefix=False)
    session.handle(_open("Be brief."))
    await _settle()
    assert llm.asked == []
    await session.close()


async def test_a_history_cut_to_the_context_is_warmed_as_the_next_turn_cuts_it(
    engines_parts: tuple[SileroVad, SmartTurn],
) -> None:
    """Past the context, the warmed prompt is fitted as the next request's is
    (the oldest turns gone, the same reserve): still its start, never too long."""
    session, llm, events = _session(engines_parts, llm_max_model_len=400)
    session.handle(_open("Be brief."))
    history = [cpb.ChatMessage(role="system", content="Be brief.")]
    for i in range(30):
        history.append(cpb.ChatMessage(role="user", content=f"question {i} " + "word " * 8))
        history.append(cpb.ChatMessage(role="assistant", content=f"answer {i} " + "word " * 8))
    first = pb.Generate(
        response_id="r1",
        messages=[*history, cpb.ChatMessage(role="user", content="Which way?")],
        max_output_tokens=8,
        retention_ratio=0.8,
    )
    session.handle(pb.Stage0Request(generate=first))
    for _ in range(100):
        await _settle()
        if len(llm.asked) == 3:
            break
    answer, ahead = llm.asked[1:]
    assert "question 0 " not in answer.prompt  # the oldest turns left
    said = "".join(e.delta.text for e in events if e.WhichOneof("kind") == "delta").strip()
    second = pb.Generate(response_id="r2", max_output_tokens=8, retention_ratio=0.8)
    second.messages.extend(first.messages)
    second.messages.add(role="assistant", content=said)
    second.messages.add(role="user", content="And then?")
    session.handle(pb.Stage0Request(generate=second))
    await _settle()
    assert llm.asked[3].prompt.startswith(ahead.prompt)
    assert len(ahead.prompt.split()) < 400
    await session.close()
