"""The answers of a stage0 cascade session: a Generate in, its LLM text out as events.

The prompt is the session's messages fitted to the context (history.py)
under stage0's preamble, the passes are tools.py's; what the answer emits
is its text deltas, its calls, then one `done` (or an `error`). Each
transcript and spoken answer is made ready for the next prompt (`prepare`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence

from antiphon.stage0.backends.cascade.llm import history, tool_prompt, tools
from antiphon.stage0.backends.cascade.llm.generation import GenerationMetrics, PromptTooLongError
from antiphon.stage0.backends.cascade.llm.prompt import preamble_for, with_preamble
from antiphon.stage0.backends.cascade.llm.tool_calls import ToolCallOut
from antiphon.stage0.backends.cascade.models import TextGenerator
from antiphon.stage0.metrics import Stage0Metrics
from antiphon.stage0.settings import Stage0Settings
from antiphon.v1 import common_pb2 as cpb
from antiphon.v1 import stage_pb2 as pb

log = logging.getLogger(__name__)

# The user's next words, not known yet: the prompt is warmed up to where they go.
# An invisible separator, which no client's text is expected to hold.
_NEXT = "\u2063"


def merge_deltas(last: pb.Stage0Event, new: pb.Stage0Event) -> pb.Stage0Event | None:
    """`new` folded into `last` (both still unsent) when both are text deltas of
    one response (same id and epoch): a delta's text only ever extends what came
    before it (the session speaks or shows it as it comes), so one delta of
    both texts says the same. None for anything else. A field added to
    `GenerationDelta` must be merged here too."""
    if last.WhichOneof("kind") != "delta" or new.WhichOneof("kind") != "delta":
        return None
    into, more = last.delta, new.delta
    if into.response_id != more.response_id or into.epoch != more.epoch:
        return None
    into.text += more.text
    return last


class Responder:
    def __init__(
        self,
        llm: TextGenerator,
        settings: Stage0Settings,
        metrics: Stage0Metrics,
        emit: Callable[[pb.Stage0Event], None],
    ) -> None:
        self._llm = llm
        self._settings = settings
        self._metrics = metrics
        self._emit = emit
        # Warm-ups so far: each its own request id (an engine refuses two alike at once).
        self._warms = 0

    def prepare(self, role: str, content: str) -> None:
        """A transcript or an answer of ours, which the session's next prompt will
        hold: its tokens are made ready before that request (chat_tokenizer.py).
        Soon, not now: the event just emitted is written to the session first."""
        # Stripped, as the session sends a message's text (session/conversation/items.py).
        if text := content.strip():
            asyncio.get_running_loop().call_soon(self._llm.prepare, role, text)

    async def warm(self, instructions: str, session_id: str) -> None:
        """Prefill the session's system prompt (stage0's preamble and the client's
        `instructions`) into the engine's prefix cache, so that its first answer
        pays only for the user's words (about a second less on a 2-core CPU)."""
        system = cpb.ChatMessage(role="system", content=instructions)
        await self._warm_ahead(pb.Generate(messages=[system]), session_id)

    async def _warm_ahead(self, last: pb.Generate, session_id: str) -> None:
        """Prefill the next answer's prompt after `last`'s messages, as far as it
        is known: up to where the user's next words go, the chat template's marks
        for the turn included (on a 2-core CPU each token of prefill is ~26 ms of
        a TTFT). Fitted to the context as `last` was, so a history cut the same
        way. The one token it makes is thrown away; a failure costs only the warmth."""
        self._warms += 1
        ahead = pb.Generate()
        ahead.CopyFrom(last)
        ahead.messages.add(role="user", content=_NEXT)
        max_tokens = ahead.max_output_tokens or self._settings.llm_max_output_tokens
        try:
            prompt = self._prompt(ahead, max_tokens)
            prompt = prompt[: prompt.rindex(_NEXT)]
            async for _out in self._llm.generate(
                f"{session_id}:warm-{self._warms}", prompt, temperature=0.0, max_tokens=1
            ):
                pass
        except Exception:
            log.warning("prefix warm-up failed", exc_info=True, extra={"session_id": session_id})

    def _prompt(self, req: pb.Generate, max_tokens: int, offered: Sequence[cpb.Tool] = ()) -> str:
        """Stage0's preamble, the client's instructions, and as much history as fits
        (with the `offered` functions in the prompt, or none: tool_prompt.py).

        Built on the event loop, not in a thread: with the history's pieces
        already encoded (chat_tokenizer.py) it costs ~0.4 ms for 20 turns, and
        the GIL lets a thread only slow it (bench/prompt_path.py, in git history: 128 sessions
        at once, the last prompt ready after 52 ms inline, 78 ms in threads)."""
        s = self._settings
        messages = tool_prompt.pairs(req.messages)
        max_model_len = s.llm_max_model_len
        return history.fit_prompt(
            with_preamble(
                messages,
                preamble_for(s.llm_preamble, s.llm_style, functions_offered=bool(offered)),
                s.llm_reminder,
            ),
            tool_prompt.renderer(self._llm, offered),
            self._llm.count_tokens,
            max_model_len=max_model_len,
            # An answer longer than half the context ends at the context's end instead.
            reserve=min(max_tokens, max_model_len // 2),
            retention_ratio=req.retention_ratio,
        )

    async def answer(self, req: pb.Generate, received: float, session_id: str) -> None:
        """`req` answered, from its first delta to its `done` (or `error`); `received`
        is when the request came in (perf_counter), `session_id` the session's now."""
        llm = self._llm
        max_tokens = req.max_output_tokens or self._settings.llm_max_output_tokens
        request_id = f"{session_id}:{req.response_id}"
        finish_reason = "stop"
        metrics = cpb.StageMetrics()
        # The spoken answer, which the next turn's prompt holds (tool calls render otherwise).
        spoken: list[str] = []
        called = False

        def prompt(offered: Sequence[cpb.Tool]) -> str:
            # Of the answer's last pass (tools.py), as the debug surface shows it.
            handed = bool(metrics.prompt)
            metrics.prompt = self._prompt(req, max_tokens, offered)
            if not handed:
                # The first pass's prompt goes to the engine now.
                self._metrics.generate_wait.observe(time.perf_counter() - received)
            return metrics.prompt

        try:
            with self._metrics.llm_batch_size.track_inprogress():
                async for out in tools.answer(
                    llm,
                    request_id,
                    req,
                    prompt,
                    temperature=req.temperature,
                    max_tokens=max_tokens,
                    check_threshold=self._settings.tool_check_threshold,
                ):
                    if isinstance(out, ToolCallOut):
                        called = True
                        self._emit(
                            pb.Stage0Event(
                                tool_call=pb.GenerationToolCall(
                                    epoch=req.epoch,
                                    response_id=req.response_id,
                                    call=out.call,
                                    refused=out.refused,
                                )
                            )
                        )
                        continue
                    if out.text:
                        spoken.append(out.text)
                        self._emit(
                            pb.Stage0Event(
                                delta=pb.GenerationDelta(
                                    epoch=req.epoch, response_id=req.response_id, text=out.text
                                )
                            )
                        )
                    if out.finished:
                        finish_reason = out.finish_reason or "stop"
                        if out.metrics is not None:
                            self._record(metrics, out.metrics)
        except Exception as exc:
            code = "generation_failed"
            if isinstance(exc, history.HistoryTooLongError | PromptTooLongError):
                # This turn alone outgrows the context; the session goes on.
                code = "context_length_exceeded"
                log.warning("prompt too long: %s", exc, extra={"session_id": session_id})
            else:
                log.exception("generation failed", extra={"session_id": session_id})
            self._emit(
                pb.Stage0Event(
                    error=pb.StageError(
                        epoch=req.epoch,
                        response_id=req.response_id,
                        code=code,
                        message=str(exc),
                    )
                )
            )
            return
        self._metrics.generations.labels(finish_reason).inc()
        self._emit(
            pb.Stage0Event(
                done=pb.GenerationDone(
                    epoch=req.epoch,
                    response_id=req.response_id,
                    finish_reason=finish_reason,
                    metrics=metrics,
                )
            )
        )
        if not called:
            answered = "".join(spoken)
            self.prepare("assistant", answered)
            if self._settings.llm_warm_prefix and finish_reason != "abort":
                # The next turn's prompt is this one's, the answer, and the user's words.
                after = pb.Generate()
                after.CopyFrom(req)
                after.messages.add(role="assistant", content=answered.strip())
                await self._warm_ahead(after, session_id)

    def _record(self, metrics: cpb.StageMetrics, m: GenerationMetrics) -> None:
        """One response's engine clocks: into its `response.done` metrics and Prometheus."""
        metrics.ttft_ms = m.ttft_ms
        metrics.tpot_ms = m.tpot_ms
        metrics.itl_ms.extend(m.itl_ms)
        metrics.num_prompt_tokens = m.num_prompt_tokens
        metrics.num_generation_tokens = m.num_generation_tokens
        self._metrics.ttft.observe(m.ttft_ms / 1000)
        self._metrics.tpot.observe(m.tpot_ms / 1000)
        for itl in m.itl_ms:
            self._metrics.itl.observe(itl / 1000)
