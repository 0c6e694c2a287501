"""Function calling on stage0: the session's tools into the prompt, the model's calls out.

History reaches the prompt as (role, content) pairs (history.py cuts those);
a call and a result are pairs of their own roles (`CALL`, `RESULT`, their
content JSON), and `renderer` turns the pairs into the chat template's
messages for one pass of the answer:

- with tools, the template's own way when it takes `tools=` (Qwen2.5's:
  the functions in its system block, calls as `<tool_call>` JSON, results
  as `<tool_response>`), else the functions described in the system
  message and calls written as the JSON that description asks for;
- without tools (a spoken answer), calls and results as plain words ("I
  called get_weather(...)", "get_weather returned ..."): given a result in
  the template's tool form, the small Qwen models only call again.

`answer` runs a response's passes. With `tool_choice` "required" or a named
function, one pass guided by a JSON schema (vLLM's structured outputs) that
allows only a call of the declared functions (the named one), with their
arguments' schemas. With "auto", the model writes freely with the tools in
its prompt and what it says streams as it comes, unless it starts with `{`,
```` ``` ```` or `<tool_call>`: that is a call beginning, never spoken. The
small Qwen models call eagerly (`get_weather` for "What is the capital of
France?") and name functions no one declared, so a call they start is
checked: each declared function is asked about (the user's words and the
function's description, a yes/no question judged by the odds of its first
token against the model's own line, `check_threshold`: llm_models.py); a
guided pass over the functions kept writes the call, and when none is kept
(the "no call" answer) the question is answered in words by a pass without
tools. After a function's result (the history ends with one), "auto"
answers in words. A call found after some words (tags, a fence, bare JSON)
is parsed at the end; one of a name no tool declares is `refused`.
"""

from __future__ import annotations

import dataclasses
import json
import re
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any, Protocol

from antiphon.stage0.generation import Guided, LlmOutput
from antiphon.v1 import common_pb2 as cpb
from antiphon.v1 import stage_pb2 as pb

Message = tuple[str, str]
Json = dict[str, Any]
# The pair roles of a history call and of a function's result (content: JSON).
CALL = "function_call"
RESULT = "function_call_output"
NO_PARAMETERS: Json = {"type": "object", "properties": {}}
# What starts a call in free text, anywhere; at the very start, `{` or `[{` too.
MARKERS = ("<tool_call>", "```", '{"name"')
# The yes/no check of a call the model started (see the module's docstring).
CHECK_SYSTEM = "Answer yes or no."
CHECK_QUESTION = (
    "A tool: {name} ({description})\nA question: {question}\n"
    "Would calling the tool help answer the question?"
)


class ChatRenderer(Protocol):
    """What rendering a prompt needs: the chat template (chat_tokenizer.ChatTokenizer)."""

    @property
    def takes_tools(self) -> bool: ...

    def render_chat(self, messages: Sequence[Json], tools: Sequence[Json] | None = None) -> str: ...


class ChatModel(ChatRenderer, Protocol):
    """What the passes need of the LLM (llm.LlmEngine, synthetic.ScriptedLlm)."""

    async def first_token_odds(
        self, request_id: str, prompt: str, options: Sequence[str]
    ) -> dict[str, float]: ...

    def generate(
        self,
        request_id: str,
        prompt: str,
        *,
        temperature: float,
        max_tokens: int,
        guided: Guided | None = None,
    ) -> AsyncGenerator[LlmOutput, None]: ...


@dataclass(frozen=True)
class ToolCallOut:
    """A call the answer makes, or (`refused`) what looked like one but is none."""

    call: cpb.ToolCall
    refused: bool = False


Output = LlmOutput | ToolCallOut
# The prompt of one pass: the history rendered with these tools (none: a spoken answer).
PromptFor = Callable[[Sequence[cpb.Tool]], str]


# ----------------------------------------------------------------- history
def pairs(messages: Sequence[cpb.ChatMessage]) -> list[Message]:
    """The session's messages as (role, content) pairs, calls and results included."""
    out: list[Message] = []
    for m in messages:
        if m.role == "tool":
            out.append((RESULT, json.dumps({"call_id": m.tool_call_id, "output": m.content})))
            continue
        if m.content or not m.tool_calls:
            out.append((m.role, m.content))
        for c in m.tool_calls:
            call = {"call_id": c.call_id, "name": c.name, "arguments": c.arguments}
            out.append((CALL, json.dumps(call)))
    return out


def ends_with_result(messages: Sequence[cpb.ChatMessage]) -> bool:
    return bool(messages) and messages[-1].role == "tool"


def last_user_text(messages: Sequence[cpb.ChatMessage]) -> str:
    return next((m.content for m in reversed(messages) if m.role == "user"), "")


def renderer(llm: ChatRenderer, tools: Sequence[cpb.Tool]) -> Callable[[Sequence[Message]], str]:
    """history.fit_prompt's `render` for one pass: with `tools` in the prompt, or none."""

    def render(messages: Sequence[Message]) -> str:
        if not tools:
            return llm.render_chat(spoken_messages(messages))
        if llm.takes_tools:
            return llm.render_chat(template_messages(messages), template_tools(tools))
        return llm.render_chat(described(spoken_messages(messages, calls_as_json=True), tools))

    return render


def template_messages(messages: Sequence[Message]) -> list[Json]:
    """Messages in the form a tools-aware chat template (Qwen2.5's) renders."""
    out: list[Json] = []
    for role, content in messages:
        if role == CALL:
            call = json.loads(content)
            entry = {
                "type": "function",
                "function": {"name": call["name"], "arguments": _args(call)},
            }
            last = out[-1] if out else None
            if last is not None and last["role"] == "assistant":
                last.setdefault("tool_calls", []).append(entry)
            else:
                out.append({"role": "assistant", "content": "", "tool_calls": [entry]})
        elif role == RESULT:
            out.append({"role": "tool", "content": json.loads(content)["output"]})
        else:
            out.append({"role": role, "content": content})
    return out


def spoken_messages(messages: Sequence[Message], *, calls_as_json: bool = False) -> list[Json]:
    """Messages of plain roles: a call in words (or as the JSON `described` asks
    for), a result as the user telling what the function returned."""
    names: dict[str, str] = {}
    out: list[Json] = []
    for role, content in messages:
        if role == CALL:
            call = json.loads(content)
            names[call["call_id"]] = call["name"]
            arguments = json.dumps(_args(call))
            text = (
                json.dumps({"name": call["name"], "arguments": _args(call)})
                if calls_as_json
                else f"I called {call['name']}({arguments})."
            )
            out.append({"role": "assistant", "content": text})
        elif role == RESULT:
            result = json.loads(content)
            name = names.get(result["call_id"], "The function")
            text = f"{name} returned: {result['output']}. Answer my question with it."
            out.append({"role": "user", "content": text})
        else:
            out.append({"role": role, "content": content})
    return out


def template_tools(tools: Sequence[cpb.Tool]) -> list[Json]:
    """The functions as chat templates take them (`tools=`)."""
    return [
        {
            "type": "function",
            "function": {
                "name": t.name,
                "description": t.description,
                "parameters": _schema(t),
            },
        }
        for t in tools
    ]


def described(messages: list[Json], tools: Sequence[cpb.Tool]) -> list[Json]:
    """For a template without tools: the functions told in the system message."""
    lines = ["You can call these functions:"]
    lines += [f"- {t.name}: {t.description} Arguments: {json.dumps(_schema(t))}" for t in tools]
    lines.append(
        'To call one, answer with only a JSON object: {"name": <function>, "arguments": {...}}.'
    )
    text = "\n".join(lines)
    if messages and messages[0]["role"] == "system":
        first = {**messages[0], "content": f"{messages[0]['content']}\n\n{text}"}
        return [first, *messages[1:]]
    return [{"role": "system", "content": text}, *messages]


def _args(call: Json) -> Json:
    """A call's arguments as an object (a history call's are JSON text)."""
    try:
        value = json.loads(call.get("arguments") or "{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _schema(tool: cpb.Tool) -> Json:
    return json.loads(tool.parameters) if tool.parameters else dict(NO_PARAMETERS)


# ------------------------------------------------------------------- calls
def call_schema(tools: Sequence[cpb.Tool]) -> Json:
    """The JSON schema of a call of one of `tools`, with that function's arguments."""
    options: list[Json] = [
        {
            "type": "object",
            "properties": {"name": {"const": t.name}, "arguments": _schema(t)},
            "required": ["name", "arguments"],
            "additionalProperties": False,
        }
        for t in tools
    ]
    return options[0] if len(options) == 1 else {"anyOf": options}


def parse_call(text: str, declared: Sequence[str]) -> ToolCallOut | None:
    """The call in what the model wrote (in `<tool_call>` tags, a fenced block,
    or bare JSON: `{"name": ..., "arguments": {...}}`, `parameters` for
    `arguments`, an OpenAI-style `function` wrapper, a list of calls of which
    the first counts). None when it holds nothing shaped like a call;
    `refused` when it names a function not in `declared`."""
    for candidate in _candidates(text):
        found = _call_object(candidate)
        if found is None:
            continue
        name, arguments = found
        call = cpb.ToolCall(name=name, arguments=json.dumps(arguments))
        if name not in declared:
            return ToolCallOut(cpb.ToolCall(name=name, arguments=text.strip()), refused=True)
        return ToolCallOut(call)
    return None


_TAGGED = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.S)
_FENCED = re.compile(r"```[A-Za-z]*\s*(.*?)(?:```|$)", re.S)


def _candidates(text: str) -> list[str]:
    found = [m.group(1) for m in _TAGGED.finditer(text)]
    found += [m.group(1) for m in _FENCED.finditer(text)]
    return [*found, text]


def _call_object(text: str) -> tuple[str, Json] | None:
    start = min((i for i in (text.find("{"), text.find("[")) if i >= 0), default=-1)
    if start < 0:
        return None
    try:
        value, _end = json.JSONDecoder().raw_decode(text[start:])
    except ValueError:
        return None
    if isinstance(value, list):
        value = value[0] if value else None
    if isinstance(value, dict) and isinstance(value.get("function"), dict):
        value = value["function"]
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        return None
    arguments = value.get("arguments", value.get("parameters", {}))
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments or "{}")
        except ValueError:
            return None
    if not isinstance(arguments, dict):
        return None
    return value["name"], arguments


class CallScanner:
    """Free text in, what may be spoken now out; a call, once it starts, is held.

    A call starts at a `MARKERS` string anywhere, or at `LEADING` as the
    first thing written; text that may still become a marker is held until
    it cannot. `finish` gives back what was held: words to say, or the
    call's text to parse.
    """

    def __init__(self) -> None:
        self._held = ""
        self._said = False
        self.call_started = False
        # The call is the answer's first thing (nothing was said before it).
        self.leading = False

    def feed(self, text: str) -> str:
        self._held += text
        if self.call_started:
            return ""
        if not self._said:
            starts = _starts_call(self._held.lstrip())
            if starts is None:
                return ""
            if starts:
                self.call_started = self.leading = True
                return ""
        at = min((i for i in (self._held.find(m) for m in MARKERS) if i >= 0), default=-1)
        if at >= 0:
            say, self._held = self._held[:at], self._held[at:]
            self.call_started = True
        else:
            keep = _marker_prefix(self._held)
            say, self._held = (
                self._held[: len(self._held) - keep],
                self._held[len(self._held) - keep :],
            )
        self._said = self._said or bool(say.strip())
        return say

    def finish(self) -> tuple[str, str]:
        """(words still to say, the call's text): one of them is ""."""
        held, self._held = self._held, ""
        return ("", held) if self.call_started else (held, "")


def _starts_call(head: str) -> bool | None:
    """Whether an answer beginning `head` begins with a call; None: too soon to tell."""
    if head.startswith("["):
        rest = head[1:].lstrip()
        return rest.startswith("{") if rest else None
    if head.startswith("{") or any(head.startswith(m) for m in MARKERS):
        return True
    if not head or any(m.startswith(head) for m in MARKERS):
        return None
    return False


def _marker_prefix(text: str) -> int:
    """How long a tail of `text` may still grow into a marker."""
    return max(
        (n for m in MARKERS for n in range(1, len(m)) if text.endswith(m[:n])),
        default=0,
    )


# ------------------------------------------------------------------ passes
def answer(
    llm: ChatModel,
    request_id: str,
    req: pb.Generate,
    prompt: PromptFor,
    *,
    temperature: float,
    max_tokens: int,
    check_threshold: float,
) -> AsyncIterator[Output]:
    """The response to `req`: its spoken text as `LlmOutput` deltas, its calls
    as `ToolCallOut`, and one finished `LlmOutput` last (its metrics those of
    the pass that answered, the time to its first token counted from the start).
    `check_threshold` is the share of "yes" from which the yes/no check keeps
    a function (the model's own: llm_models.py)."""
    return _Passes(llm, request_id, req, prompt, temperature, max_tokens, check_threshold).run()


@dataclass
class _Passes:
    llm: ChatModel
    request_id: str
    req: pb.Generate
    prompt: PromptFor
    temperature: float
    max_tokens: int
    check_threshold: float
    started: float = field(default_factory=time.perf_counter)
    pass_started: float = 0.0
    count: int = 0

    @property
    def declared(self) -> list[cpb.Tool]:
        return list(self.req.tools)

    async def run(self) -> AsyncIterator[Output]:
        mode = self.req.tool_choice.mode or "auto"
        if not self.declared:
            stream = self._plain()
        elif mode == "none":
            stream = self._spoken()
        elif mode == "required":
            stream = self._guided(self.declared)
        elif mode == "function":
            forced = [t for t in self.declared if t.name == self.req.tool_choice.name]
            stream = self._guided(forced)
        elif ends_with_result(self.req.messages):
            stream = self._spoken()
        else:
            stream = self._free()
        async for out in stream:
            yield out

    def _rid(self) -> str:
        """A new pass's request id."""
        self.count += 1
        self.pass_started = time.perf_counter()
        return self.request_id if self.count == 1 else f"{self.request_id}:{self.count}"

    def _final(self, out: LlmOutput) -> LlmOutput:
        """The answering pass's end, with no text (what it wrote was given out
        already, or was a call) and its first token timed from the response's start."""
        out = dataclasses.replace(out, text="")
        if out.metrics is None:
            return out
        earlier_ms = (self.pass_started - self.started) * 1000
        return dataclasses.replace(
            out, metrics=dataclasses.replace(out.metrics, ttft_ms=out.metrics.ttft_ms + earlier_ms)
        )

    async def _plain(self) -> AsyncIterator[Output]:
        """No tools: the model's text as it comes."""
        gen = self.llm.generate(
            self._rid(),
            self.prompt(()),
            temperature=self.temperature,
            max_tokens=self.max_tokens,
        )
        async with aclosing(gen):
            async for out in gen:
                yield out

    async def _free(self) -> AsyncIterator[Output]:
        """Words as they come, with the tools in the prompt; a call it starts with is checked."""
        scanner = CallScanner()
        async for out in self._said(self.declared, scanner):
            yield out
        if scanner.leading:
            async for checked in self._checked_call():
                yield checked

    async def _checked_call(self) -> AsyncIterator[Output]:
        """The model starts a call: the functions the question needs, if any, get it."""
        question = last_user_text(self.req.messages)
        kept = [t for t in self.declared if await self._needed(t, question)]
        stream = self._guided(kept) if kept else self._spoken()
        async for out in stream:
            yield out

    async def _needed(self, tool: cpb.Tool, question: str) -> bool:
        messages = [
            {"role": "system", "content": CHECK_SYSTEM},
            {
                "role": "user",
                "content": CHECK_QUESTION.format(
                    name=tool.name, description=tool.description, question=question
                ),
            },
        ]
        odds = await self.llm.first_token_odds(
            self._rid(), self.llm.render_chat(messages), ("yes", "no")
        )
        total = odds["yes"] + odds["no"]
        return total > 0 and odds["yes"] / total >= self.check_threshold

    async def _guided(self, tools: Sequence[cpb.Tool]) -> AsyncIterator[Output]:
        """One pass that can only write a call of one of `tools`."""
        last: LlmOutput | None = None
        text = ""
        gen = self.llm.generate(
            self._rid(),
            self.prompt(self.declared),
            temperature=0.0,
            max_tokens=self.max_tokens,
            guided=Guided(json_schema=call_schema(tools)),
        )
        async with aclosing(gen):
            async for out in gen:
                text += out.text
                if out.finished:
                    last = out
        yield parse_call(text, [t.name for t in tools]) or _refused(text)
        if last is not None:
            yield self._final(last)

    async def _spoken(self) -> AsyncIterator[Output]:
        """A spoken answer, no tools in the prompt (a call it still writes is no call)."""
        async for out in self._said((), CallScanner()):
            yield out

    async def _said(
        self, offered: Sequence[cpb.Tool], scanner: CallScanner
    ) -> AsyncIterator[Output]:
        """One pass of free text with `offered` in the prompt: the words as they
        come, what the scanner held (words, or a call of one of `offered`), the
        pass's end. With tools offered, a call that starts the answer ends the
        pass there (closing the generator aborts the rest), with nothing after."""
        end: LlmOutput | None = None
        gen = self.llm.generate(
            self._rid(),
            self.prompt(offered),
            temperature=self.temperature,
            max_tokens=self.max_tokens,
        )
        async with aclosing(gen):
            async for out in gen:
                say = scanner.feed(out.text)
                if say:
                    yield LlmOutput(text=say, finished=False)
                if offered and scanner.leading:
                    return
                if out.finished:
                    end = out
        for held in _held(scanner, [t.name for t in offered]):
            yield held
        if end is not None:
            yield self._final(end)


def _held(scanner: CallScanner, declared: Sequence[str]) -> list[Output]:
    """What the scanner held at the end: words (what was no call after all), or the call."""
    words, call_text = scanner.finish()
    if call_text:
        call = parse_call(call_text, declared)
        if call is not None:
            return [call]
        words = call_text
    return [LlmOutput(text=words, finished=False)] if words else []


def _refused(text: str) -> ToolCallOut:
    found = _call_object(text)
    name = found[0] if found is not None else ""
    return ToolCallOut(cpb.ToolCall(name=name, arguments=text.strip()), refused=True)
