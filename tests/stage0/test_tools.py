"""Function calling on stage0 with a scripted model (tools.py and the modules it
uses, tool_prompt.py and tool_calls.py): what reaches the prompt, how a call is
read out of free text, and which passes answer."""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from antiphon.stage0.backends.cascade.llm import tool_calls, tool_prompt, tools
from antiphon.stage0.backends.cascade.llm.generation import GenerationMetrics, Guided, LlmOutput
from antiphon.v1 import common_pb2 as cpb
from antiphon.v1 import stage_pb2 as pb

WEATHER = cpb.Tool(
    name="get_weather",
    description="Get the current weather in a city.",
    parameters=json.dumps(
        {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    ),
)
TIME = cpb.Tool(name="get_time", description="Get the local time in a city.")
SYSTEM = cpb.ChatMessage(role="system", content="Be brief.")


def ask(question: str, *declared: cpb.Tool, mode: str = "auto", name: str = "") -> pb.Generate:
    return pb.Generate(
        messages=[SYSTEM, cpb.ChatMessage(role="user", content=question)],
        tools=declared,
        tool_choice=cpb.ToolChoice(mode=mode, name=name),
    )


# ----------------------------------------------------------------- parsing
@pytest.mark.parametrize(
    "text",
    [
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
        '```json\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n```',
        '{"name": "get_weather", "arguments": {"city": "Paris"}}',
        '  {"name": "get_weather", "parameters": {"city": "Paris"}} and more',
        '[{"name": "get_weather", "arguments": {"city": "Paris"}}]',
        json.dumps(
            {
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
            }
        ),
        'Let me check. <tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}',
    ],
)
def test_a_call_is_read_from_tags_fences_or_bare_json(text: str) -> None:
    out = tool_calls.parse_call(text, ["get_weather"])
    assert out is not None and not out.refused
    assert (out.call.name, json.loads(out.call.arguments)) == ("get_weather", {"city": "Paris"})


def test_a_function_nobody_declared_is_refused_with_what_the_model_wrote() -> None:
    text = '{"name": "two_plus_two", "arguments": {}}'
    out = tool_calls.parse_call(text, ["get_weather"])
    assert out is not None and out.refused
    assert (out.call.name, out.call.arguments) == ("two_plus_two", text)


@pytest.mark.parametrize(
    "text", ["Paris is sunny.", "{not json", '{"city": "Paris"}', '{"name": 3, "arguments": {}}']
)
def test_what_is_not_shaped_like_a_call_is_no_call(text: str) -> None:
    assert tool_calls.parse_call(text, ["get_weather"]) is None


# ----------------------------------------------------------------- scanner
def scan(*chunks: str) -> tuple[list[str], tool_calls.CallScanner]:
    scanner = tool_calls.CallScanner()
    return [scanner.feed(c) for c in chunks], scanner


def test_plain_words_pass_through_holding_back_only_what_may_become_a_marker() -> None:
    said, scanner = scan("It is", " sunny <", "3 today `", "`x")
    assert said == ["It is", " sunny ", "<3 today ", "``x"]
    assert scanner.finish() == ("", "") and not scanner.call_started


@pytest.mark.parametrize("start", ["{", '  {"name"', "```json", "<tool_call>", "[ {"])
def test_an_answer_that_starts_as_a_call_is_never_said(start: str) -> None:
    said, scanner = scan(start, ' "get_weather"}')
    assert said == ["", ""] and scanner.leading
    assert scanner.finish()[0] == ""


def test_a_call_after_words_holds_everything_from_its_marker() -> None:
    said, scanner = scan("Let me check. <tool", '_call>{"name": "get_weather"}')
    assert "".join(said) == "Let me check. " and not scanner.leading
    assert scanner.finish() == ("", '<tool_call>{"name": "get_weather"}')


def test_a_bracket_that_opens_no_object_is_words() -> None:
    said, scanner = scan("[", "laughs] Hi")
    assert "".join(said) == "[laughs] Hi" and not scanner.call_started


# --------------------------------------------------------------- rendering
HISTORY = [
    SYSTEM,
    cpb.ChatMessage(role="user", content="Weather in Paris?"),
    cpb.ChatMessage(role="assistant", content="Let me look."),
    cpb.ChatMessage(
        role="assistant",
        tool_calls=[
            cpb.ToolCall(call_id="call_1", name="get_weather", arguments='{"city":"Paris"}')
        ],
    ),
    cpb.ChatMessage(role="tool", tool_call_id="call_1", content='{"c": 21}'),
]


def test_with_tools_a_tools_aware_template_gets_calls_and_results_its_own_way() -> None:
    messages = tool_prompt.template_messages(tool_prompt.pairs(HISTORY))
    assert messages[2] == {
        "role": "assistant",
        "content": "Let me look.",
        "tool_calls": [
            {
                "type": "function",
                "function": {"name": "get_weather", "arguments": {"city": "Paris"}},
            }
        ],
    }
    assert messages[3] == {"role": "tool", "content": '{"c": 21}'}
    assert tool_prompt.template_tools([WEATHER])[0]["function"]["parameters"]["required"] == [
        "city"
    ]


def test_a_spoken_answer_sees_calls_and_results_in_plain_words() -> None:
    messages = tool_prompt.spoken_messages(tool_prompt.pairs(HISTORY))
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "assistant", "user"]
    assert messages[3]["content"] == 'I called get_weather({"city": "Paris"}).'
    assert messages[4]["content"].startswith('get_weather returned: {"c": 21}.')


def test_a_template_without_tools_is_told_them_in_the_system_message() -> None:
    messages = tool_prompt.described(
        tool_prompt.spoken_messages(tool_prompt.pairs(HISTORY)), [WEATHER]
    )
    assert messages[0]["content"].startswith("Be brief.\n\nYou can call these functions:")
    assert "- get_weather: Get the current weather in a city." in messages[0]["content"]


def test_a_guided_call_may_name_only_the_functions_allowed_with_their_arguments() -> None:
    one = tool_calls.call_schema([WEATHER])
    assert one["properties"]["name"] == {"const": "get_weather"}
    assert one["properties"]["arguments"]["required"] == ["city"]
    both = tool_calls.call_schema([WEATHER, TIME])
    names = [o["properties"]["name"]["const"] for o in both["anyOf"]]
    assert names == ["get_weather", "get_time"]
    assert both["anyOf"][1]["properties"]["arguments"] == tool_prompt.NO_PARAMETERS


# ------------------------------------------------------------------ passes
@dataclass
class Pass:
    request_id: str
    offered: list[str]
    guided: Guided | None
    closed_early: bool = False


@dataclass
class ScriptedModel:
    """Writes `free` with tools in its prompt, `spoken` without, `call` when guided;
    the yes/no check answers with `yes` odds."""

    free: list[str] = field(default_factory=list)
    spoken: list[str] = field(default_factory=lambda: ["Paris", " is lovely."])
    call: str = '{"name": "get_weather", "arguments": {"city": "Paris"}}'
    yes: float = 0.6
    takes_tools: bool = True
    passes: list[Pass] = field(default_factory=list)
    checks: list[str] = field(default_factory=list)

    def render_chat(self, messages: Sequence[Any], tools: Sequence[Any] | None = None) -> str:
        return json.dumps({"offered": [t["function"]["name"] for t in tools or []]})

    async def first_token_odds(
        self, request_id: str, prompt: str, options: Sequence[str]
    ) -> dict[str, float]:
        self.checks.append(request_id)
        return {"yes": self.yes, "no": 1 - self.yes}

    async def generate(
        self,
        request_id: str,
        prompt: str,
        *,
        temperature: float,
        max_tokens: int,
        guided: Guided | None = None,
    ) -> AsyncGenerator[LlmOutput, None]:
        offered = json.loads(prompt)["offered"]
        record = Pass(request_id, offered, guided, closed_early=True)
        self.passes.append(record)
        chunks = [self.call] if guided else (self.free if offered else self.spoken)
        for chunk in chunks:
            yield LlmOutput(text=chunk, finished=False)
        metrics = GenerationMetrics(10.0, 5.0, [5.0], 3, len(chunks))
        record.closed_early = False
        yield LlmOutput(text="", finished=True, finish_reason="stop", metrics=metrics)


async def run(model: ScriptedModel, req: pb.Generate) -> list[tools.Output]:
    def prompt(offered: Sequence[cpb.Tool]) -> str:
        return tool_prompt.renderer(model, offered)(tool_prompt.pairs(req.messages))

    return [
        o
        async for o in tools.answer(
            model, "s:r", req, prompt, temperature=0, max_tokens=64, check_threshold=0.5
        )
    ]


def said(outputs: list[tools.Output]) -> str:
    return "".join(o.text for o in outputs if isinstance(o, LlmOutput))


def calls(outputs: list[tools.Output]) -> list[tuple[str, bool]]:
    return [(o.call.name, o.refused) for o in outputs if isinstance(o, tool_calls.ToolCallOut)]


def ends_once(outputs: list[tools.Output]) -> bool:
    done = [o for o in outputs if isinstance(o, LlmOutput) and o.finished]
    return len(done) == 1 and done[0] is outputs[-1] and not done[0].text


async def test_required_is_one_guided_pass_over_every_declared_function() -> None:
    model = ScriptedModel()
    out = await run(model, ask("Hi", WEATHER, TIME, mode="required"))
    assert calls(out) == [("get_weather", False)] and said(out) == "" and ends_once(out)
    (only,) = model.passes
    assert only.guided is not None and only.guided.json_schema == tool_calls.call_schema(
        [WEATHER, TIME]
    )


async def test_a_named_function_is_the_only_one_the_guided_pass_allows() -> None:
    model = ScriptedModel(call='{"name": "get_time", "arguments": {}}')
    out = await run(model, ask("Hi", WEATHER, TIME, mode="function", name="get_time"))
    assert calls(out) == [("get_time", False)]
    guided = model.passes[0].guided
    assert guided is not None and guided.json_schema == tool_calls.call_schema([TIME])


async def test_auto_says_words_as_they_come_in_one_pass() -> None:
    model = ScriptedModel(free=["The capital", " is Paris."])
    out = await run(model, ask("Capital of France?", WEATHER))
    assert said(out) == "The capital is Paris." and calls(out) == [] and ends_once(out)
    assert [p.offered for p in model.passes] == [["get_weather"]] and model.checks == []


async def test_auto_a_call_the_question_needs_is_written_by_a_guided_pass() -> None:
    model = ScriptedModel(free=["{", '"name": "get_weather"', "}"], yes=0.6)
    out = await run(model, ask("Weather in Paris?", WEATHER))
    assert calls(out) == [("get_weather", False)] and said(out) == "" and ends_once(out)
    free, guided = model.passes
    # The free pass stopped at its first `{`: its call was never written out.
    assert free.closed_early and guided.guided is not None
    assert model.checks == ["s:r:2"] and guided.request_id == "s:r:3"


async def test_auto_a_call_the_question_does_not_need_becomes_a_spoken_answer() -> None:
    model = ScriptedModel(free=['{"name": "get_weather"}'], yes=0.3)
    out = await run(model, ask("Capital of France?", WEATHER))
    assert said(out) == "Paris is lovely." and calls(out) == [] and ends_once(out)
    assert [p.offered for p in model.passes] == [["get_weather"], []]


async def test_auto_a_call_after_words_is_read_at_the_end() -> None:
    free = ["Let me check. ", '<tool_call>{"name": "get_weather", "arguments": {}}</tool_call>']
    out = await run(ScriptedModel(free=free), ask("Weather?", WEATHER))
    assert said(out) == "Let me check. " and calls(out) == [("get_weather", False)]
    refused = await run(
        ScriptedModel(free=["Hm. ", '```json\n{"name": "search", "arguments": {}}\n```']),
        ask("Weather?", WEATHER),
    )
    assert said(refused) == "Hm. " and calls(refused) == [("search", True)]


async def test_a_fenced_block_that_is_no_call_is_said_after_all() -> None:
    out = await run(ScriptedModel(free=["Try ", "```ls```"]), ask("How?", WEATHER))
    assert said(out) == "Try ```ls```" and calls(out) == []


async def test_after_a_function_s_result_auto_answers_in_words_without_tools() -> None:
    req = pb.Generate(messages=HISTORY, tools=[WEATHER], tool_choice=cpb.ToolChoice(mode="auto"))
    model = ScriptedModel(free=["{"])
    out = await run(model, req)
    assert said(out) == "Paris is lovely." and [p.offered for p in model.passes] == [[]]


async def test_none_and_no_tools_never_put_a_function_in_the_prompt() -> None:
    model = ScriptedModel()
    out = await run(model, ask("Hi", WEATHER, mode="none"))
    assert said(out) == "Paris is lovely."
    plain = await run(model, ask("Hi"))
    assert said(plain) == "Paris is lovely." and ends_once(plain)
    assert [p.offered for p in model.passes] == [[], []]


async def test_a_spoken_answer_that_writes_a_call_says_none_of_it() -> None:
    model = ScriptedModel(spoken=['{"name": "get_weather", "arguments": {}}'])
    out = await run(model, ask("Hi", WEATHER, mode="none"))
    assert said(out) == "" and calls(out) == [("get_weather", True)] and ends_once(out)


async def test_the_answer_s_first_token_is_timed_from_the_response_s_start() -> None:
    model = ScriptedModel(free=["{"], yes=0.6)
    out = await run(model, ask("Weather?", WEATHER))
    last = out[-1]
    assert isinstance(last, LlmOutput) and last.metrics is not None
    assert last.metrics.ttft_ms >= 10.0
