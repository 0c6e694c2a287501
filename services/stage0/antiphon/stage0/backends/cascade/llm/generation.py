"""What a generation is, apart from the engine that runs it: its decoding
guards, its guided output, its streamed deltas and its metrics.

Kept apart from llm.py so that what only handles generations (the cascade's
tools, the synthetic backend) never imports vLLM and torch: a synthetic
worker starts in a second instead of loading them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class GenerationMetrics:
    """Per-request timing on the engine's clocks (falls back to wall clock in `generate`)."""

    ttft_ms: float
    tpot_ms: float
    itl_ms: list[float]
    num_prompt_tokens: int
    num_generation_tokens: int
    # Prompt tokens whose KV cache an earlier request left (prefix reuse).
    num_cached_tokens: int = 0


class PromptTooLongError(ValueError):
    """The prompt leaves no room to generate within `max_model_len`."""

    def __init__(self, prompt_tokens: int, max_model_len: int) -> None:
        super().__init__(f"prompt has {prompt_tokens} tokens; max_model_len is {max_model_len}")
        self.prompt_tokens = prompt_tokens
        self.max_model_len = max_model_len


@dataclass(frozen=True)
class Decoding:
    """How every request of an engine is decoded, besides its temperature and length.

    The defaults are vLLM's plain decoding; the worker's settings choose the guards.
    """

    # vLLM's penalty on tokens already in the prompt or the output (1.0: none).
    repetition_penalty: float = 1.0
    # The loop stop: an n-gram of output tokens seen `loop_repeats` times ends
    # the response (finish_reason "repetition"); 0 turns it off.
    loop_ngram: int = 0
    loop_repeats: int = 2
    # Token ids every answer is held to (vLLM's allowed_token_ids); None: any.
    # For capacity benches of random weights, whose answers are otherwise runs
    # of odd tokens that no voice speaks like a person (bench/gpu/speakable.py).
    allowed_token_ids: tuple[int, ...] | None = None


# vLLM's own decoding, no guards.
PLAIN_DECODING = Decoding()


@dataclass(frozen=True)
class Guided:
    """One request's output held to a JSON schema, or to one of some choices
    (vLLM's structured outputs): how stage0's tools get a call (tools.py)."""

    json_schema: dict[str, Any] | None = None
    choice: tuple[str, ...] | None = None


@dataclass(frozen=True)
class LlmOutput:
    """One streamed text delta; the last one has `finished`, a reason and metrics."""

    text: str
    finished: bool
    finish_reason: str | None = None
    metrics: GenerationMetrics | None = None
