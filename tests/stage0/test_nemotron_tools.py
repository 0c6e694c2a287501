"""Tools on a `nemotron` worker's batch: the model's function channel read as
calls, a function's result and context text forced into that channel, the
tools in the prompt. The tiny checkpoint's function head echoes its channel
(tests/support/nemotron.py), so a call forced into the channel comes back out
of the model's own head a step later, and is read as the model's call."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

pytest.importorskip("nemo.collections.speechlm2")

from prometheus_client import CollectorRegistry

from antiphon.stage0.backends.nemotron.listening import Listening
from antiphon.stage0.backends.nemotron.model import CALL_END, CALL_START, NemotronModel
from antiphon.stage0.backends.nemotron.session import NemotronSession
from antiphon.stage0.metrics import Stage0Metrics
from antiphon.stage0.settings import Stage0Settings
from antiphon.v1 import common_pb2 as cpb
from antiphon.v1 import stage_pb2 as pb
from tests.support.nemotron import tools_checkpoint

pytestmark = pytest.mark.models

WEATHER = cpb.Tool(
    name="get_weather",
    description="The weather in a city",
    parameters=json.dumps({"type": "object", "properties": {"city": {"type": "string"}}}),
)
PARIS = '[{"name": "get_weather", "arguments": {"city": "Paris"}}]'
CALL = f"{CALL_START}<TOOLCALL>{PARIS}</TOOLCALL>{CALL_END}"


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> NemotronModel:
    torch.set_num_threads(1)
    folder = tools_checkpoint(Path(tmp_path_factory.mktemp("nemotron-tools")))
    return NemotronModel.load(Stage0Settings(duplex_checkpoint=str(folder), duplex_device="cpu"))


def _listening(model: NemotronModel) -> Listening:
    metrics = Stage0Metrics(CollectorRegistry())
    return Listening(model, 2, metrics=metrics, jitter_ms=4000, quiet_frames=2, window=500)


def _kinds(events: list[pb.Stage0Event], kind: str) -> list:
    return [getattr(e, kind) for e in events if e.WhichOneof("kind") == kind]


def test_a_call_the_model_says_in_its_function_channel_is_a_tool_call(model):
    listening = _listening(model)
    events: list[pb.Stage0Event] = []
    other: list[pb.Stage0Event] = []
    row = listening.open(events.append, "a")
    listening.open(other.append, "b")
    tokens = model.function_tokens(CALL)
    assert listening.force(row, tokens)
    for _ in range(len(tokens) + 2):
        listening.step()
    (call,) = _kinds(events, "tool_call")
    assert not call.refused
    assert call.call.name == "get_weather"
    assert json.loads(call.call.arguments) == {"city": "Paris"}
    assert call.call.call_id.startswith("call_")
    # The text channel waits while the channel takes it in; the other row calls nothing.
    frames = _kinds(events, "frame")
    assert {f.tokens[0] for f in frames[: len(tokens)]} == {model.stt.text_pad_id}
    assert _kinds(other, "tool_call") == []


def test_what_is_no_call_is_refused_with_what_the_model_said(model):
    listening = _listening(model)
    events: list[pb.Stage0Event] = []
    row = listening.open(events.append, "a")
    tokens = model.function_tokens(f"{CALL_START}<TOOLCALL>[{{'name': get</TOOLCALL>{CALL_END}")
    listening.force(row, tokens)
    for _ in range(len(tokens) + 2):
        listening.step()
    (call,) = _kinds(events, "tool_call")
    assert call.refused and "get" in call.call.arguments and call.call.name == ""


def test_a_result_goes_into_the_channel_and_context_is_told_taken(model):
    listening = _listening(model)
    events: list[pb.Stage0Event] = []
    session = NemotronSession(listening, events.append)
    session.handle(pb.Stage0Request(open=pb.Stage0Open(session_id="a")))
    out = pb.Stage0ToolOutput(epoch=1, call_id="call_1", output='{"temperature": 21}')
    session.handle(pb.Stage0Request(tool_output=out))
    context = pb.Stage0Context(epoch=1, id="ctx-1", text="It is sunny.")
    session.handle(pb.Stage0Request(context=context))
    waiting = len(listening._forced[session.row.index])
    result = model.function_tokens('<TOOL_RESPONSE>[{"temperature":21}]</TOOL_RESPONSE>')
    assert waiting == len(result) + len(model.function_tokens("It is sunny."))
    for _ in range(waiting + 2):
        listening.step()
    # The result echoed back is no call; the context is taken with its last token.
    assert _kinds(events, "tool_call") == []
    (taken,) = _kinds(events, "context_taken")
    assert (taken.id, taken.index) == ("ctx-1", waiting - 1)
    assert _kinds(events, "error") == []


def test_tools_go_into_the_prompt_and_more_than_five_are_refused(model):
    plain = model.prefill("be brief", "")
    tooled = model.prefill("be brief", "", tools=[WEATHER])
    text = model.stt.tokenizer.ids_to_text(tooled[1:-1])
    assert len(tooled) > len(plain) and "get_weather" in text and "AVAILABLE_TOOLS" in text
    events: list[pb.Stage0Event] = []
    session = NemotronSession(_listening(model), events.append)
    many = [cpb.Tool(name=f"f{i}") for i in range(6)]
    session.handle(
        pb.Stage0Request(open=pb.Stage0Open(session_id="a", instructions="x", tools=many))
    )
    (error,) = _kinds(events, "error")
    assert error.code == "too_many_tools"
    assert session.row is not None  # the session goes on, without tools
