"""Function calling on stage0: the passes that answer a response.

The prompt of each pass comes from tool_prompt.py (the history, with the
functions offered or none), a call is read out by tool_calls.py.

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
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Protocol

from antiphon.stage0.backends.cascade.llm.generation import Guided, LlmOutput
from antiphon.stage0.backends.cascade.llm.tool_calls import (
    CallScanner,
    ToolCallOut,
    call_schema,
    parse_call,
    refused_call,
)
from antiphon.stage0.backends.cascade.llm.tool_prompt import (
    ChatRenderer,
    ends_with_result,
    last_user_text,
)
from antiphon.v1 import common_pb2 as cpb
from antiphon.v1 import stage_pb2 as pb

# The yes/no check of a call the model started (see the module's docstring).
CHECK_SYSTEM = "Answer yes or no."
CHECK_QUESTION = (
    "A tool: {name} ({description})\nA question: {question}\n"
    "Would calling the tool help answer the question?"
)


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


Output = LlmOutput | ToolCallOut
# The prompt of one pass: the history rendered with these tools (none: a spoken answer).
PromptFor = Callable[[Sequence[cpb.Tool]], str]


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
        yield parse_call(text, [t.name for t in tools]) or refused_call(text)
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
