"""MiniCPM-o 4.5's thinker serving duplex sessions on one vLLM engine.

Each session is one resumable request (vLLM's streaming input): its context
stays in the KV cache from unit to unit, and a unit prefills only itself,
as the upstream serves this model. `ThinkerSession.hear` sends a unit (a
second of 16 kHz audio, maybe a camera frame) and returns what the model
answered (units.py owns the decoder's rules); units of many sessions batch
in the engine's steps.

Departures from the published duplex code, each for stock vLLM:
- a unit's audio goes through vLLM's MiniCPM-o processor, between
  `<|audio_start|>` and `<|audio_end|>`, its Whisper encoder run on that
  second alone; the published code places the embeddings bare and carries
  the encoder's cache across units (about 30 s);
- a frame is vLLM's image item (with its `<image_id>` and slices), scaled
  down to honour `max_slice_nums` (frames.py);
- no 28-character cap on a unit's text, no `<|turn_eos|>` length penalty,
  no `<|chunk_eos|>` pre-sample: they need vLLM's sampler.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from antiphon.common.ids import new_id
from antiphon.stage0.backends.minicpmo.backend import SAMPLE_RATE
from antiphon.stage0.backends.minicpmo.units import (
    MAX_SAMPLED,
    Answer,
    UnitState,
    Vocabulary,
    system_ids,
)

if TYPE_CHECKING:
    from PIL.Image import Image
    from vllm import SamplingParams
    from vllm.v1.engine.async_llm import AsyncLLM

AUDIO_PLACEHOLDER = "(<audio>./</audio>)"
IMAGE_PLACEHOLDER = "(<image>./</image>)"


@dataclass(frozen=True)
class Unit:
    """One unit of a session's input."""

    audio: np.ndarray  # float32 mono at SAMPLE_RATE, a second
    frame: Image | None = None


class Thinker:
    """The engine and what every session shares: the tokenizer's ids and the
    sampling settings (`sampling`: temperature and the like; each piece of
    a unit gets its own budget and the unit's stop tokens)."""

    def __init__(
        self,
        engine: AsyncLLM,
        sampling: SamplingParams,
        *,
        scale_resolution: int = 448,
        context: int | None = None,
    ) -> None:
        self.engine = engine
        self.sampling = sampling
        # Tokens a session's request may hold (None: the engine's max_model_len).
        self.context = context or engine.model_config.max_model_len
        # The side of the square a frame's slices are measured in (the checkpoint's).
        self.scale_resolution = scale_resolution
        tokenizer = engine.get_tokenizer()
        self._tokenizer = tokenizer
        self.vocab = Vocabulary.of(tokenizer)
        self._audio = tokenizer.encode(AUDIO_PLACEHOLDER, add_special_tokens=False)
        self._image = tokenizer.encode(IMAGE_PLACEHOLDER, add_special_tokens=False)

    def open(self, instructions: str = "") -> ThinkerSession:
        return ThinkerSession(self, system_ids(self._tokenizer, instructions))

    def text(self, tokens: tuple[int, ...]) -> str:
        """What `tokens` say, markers left out."""
        return str(self._tokenizer.decode(list(tokens), skip_special_tokens=True)) if tokens else ""

    def unit_ids(self, head: list[int], unit: Unit) -> list[int]:
        """A unit's prompt ids, vLLM's placeholders for its media in place."""
        return [*head, *(self._image if unit.frame is not None else []), *self._audio]

    def params(self, budget: int) -> SamplingParams:
        from vllm.sampling_params import RequestOutputKind

        piece = self.sampling.clone()
        piece.max_tokens = budget
        piece.stop_token_ids = self.vocab.terminators
        piece.output_kind = RequestOutputKind.DELTA
        piece.detokenize = False
        return piece

    async def render(self, ids: list[int], unit: Unit | None) -> Any:
        """A piece's prompt as the engine takes it; media processed here, off
        the engine's input task (vLLM would do it there, blocking the loop)."""
        from vllm.inputs import TokensPrompt
        from vllm.inputs.engine import tokens_input
        from vllm.renderers.inputs.preprocess import parse_model_prompt

        if unit is None:
            return tokens_input(ids)
        media: dict[str, Any] = {"audio": (unit.audio, SAMPLE_RATE)}
        if unit.frame is not None:
            media["image"] = unit.frame
        prompt = TokensPrompt(prompt_token_ids=ids, multi_modal_data=media)
        parsed = parse_model_prompt(self.engine.model_config, prompt)
        # Past vLLM's media cache: it marks an item sent to the engine once
        # rendered, and a unit rendered again after a restart would then reach
        # the engine as a hash it never got. A second of audio recurs no more
        # than a camera frame does.
        [rendered] = await self.engine.renderer.render_cmpl_async([parsed], skip_mm_cache=True)
        return rendered


async def warm_up(thinker: Thinker, capacity: int) -> list[int]:
    """Sessions hearing a second of silence together, in batches of 1, 2,
    4, ... up to `capacity`, before the worker serves; the batch sizes run.
    Each session holds one of the engine's sequences until it closes, so
    `capacity` is at most its `max_num_seqs` (engines.py makes them equal).

    Why: vLLM's GPU sampler compiles its top-k/top-p kernel the first time it
    meets a larger batch, some 9 s in which every session's unit waits (on
    an H100, 32 sessions lost 109 units to it: docs/duplex-models.md)."""
    sizes = sorted({min(capacity, 2**k) for k in range(max(capacity, 1).bit_length() + 1)})
    silence = Unit(np.zeros(SAMPLE_RATE, np.float32))
    for size in sizes:
        sessions = [thinker.open() for _ in range(size)]
        try:
            await asyncio.gather(*(s.hear(silence) for s in sessions))
        finally:
            await asyncio.gather(*(s.close() for s in sessions))
    return sizes


# How often a session waiting for the engine looks whether it died.
DEATH_CHECK_S = 1.0


class ThinkerSession:
    """One session's resumable request: units in, answers out, in order.

    A unit that would take the context past `Thinker.context` starts a new
    request from the system turn (`restarts` counts them): the model forgets
    what was said, where vLLM would stop the request at its length."""

    def __init__(self, thinker: Thinker, prefill: list[int]) -> None:
        self._thinker = thinker
        self._system = prefill
        self._lock = asyncio.Lock()
        self.restarts = 0
        self._fresh()

    def _fresh(self) -> None:
        self.request_id = new_id("minicpmo")
        self._prefill = list(self._system)
        self._state = UnitState(self._thinker.vocab)
        self._pieces: asyncio.Queue[Any] = asyncio.Queue()
        self._outputs: asyncio.Queue[Any] = asyncio.Queue()
        self._reading: asyncio.Task[None] | None = None
        self._used = 0  # tokens in the request's context

    async def hear(self, unit: Unit) -> Answer:
        """The model's answer to `unit`, the session's next second."""
        async with self._lock:
            piece = await self._unit(unit)
            if self._used + _length(piece) + MAX_SAMPLED + 3 > self._thinker.context:
                await self.close()
                self._fresh()
                self.restarts += 1
                piece = await self._unit(unit)
            while piece is not None:
                self._send(piece, self._state.budget)
                sampled, stopped = await self._piece()
                self._used += _length(piece) + len(sampled)
                more = self._state.take(sampled, stopped)
                piece = await self._thinker.render(more, None) if more else None
            return self._state.answer()

    async def _unit(self, unit: Unit) -> Any:
        ids = self._thinker.unit_ids([*self._prefill, *self._state.unit_head()], unit)
        self._prefill = []
        return await self._thinker.render(ids, unit)

    async def close(self) -> None:
        """The request ends; its KV cache is freed."""
        if self._reading is None:
            return
        self._pieces.put_nowait(None)
        await self._thinker.engine.abort(self.request_id)
        self._reading.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reading
        self._reading = None

    def _send(self, prompt: Any, budget: int) -> None:
        from vllm.engine.protocol import StreamingInput

        self._pieces.put_nowait(
            StreamingInput(prompt=prompt, sampling_params=self._thinker.params(budget))
        )
        if self._reading is None:
            self._reading = asyncio.create_task(self._read())

    async def _piece(self) -> tuple[list[int], bool]:
        """The tokens of the piece in flight, and whether a stop token ended it."""
        sampled: list[int] = []
        while True:
            out = await self._next_output()
            if isinstance(out, BaseException):
                raise out
            completion = out.outputs[0]
            sampled += completion.token_ids
            if completion.finish_reason is not None:
                return sampled, completion.finish_reason == "stop"

    async def _next_output(self) -> Any:
        """The request's next output, or the engine's death: vLLM fails the
        requests in flight when its engine dies, but one added as it died
        may wait for an output forever."""
        engine = self._thinker.engine
        while True:
            try:
                return await asyncio.wait_for(self._outputs.get(), DEATH_CHECK_S)
            except TimeoutError:
                if engine.errored:
                    return engine.dead_error

    async def _read(self) -> None:
        # The request's own queues, not the session's attributes: a restart
        # replaces those while this request's input task may still be running.
        pieces, outputs = self._pieces, self._outputs
        params = self._thinker.params(1)
        try:
            async for out in self._thinker.engine.generate(
                _inputs(pieces), params, self.request_id
            ):
                outputs.put_nowait(out)
        except Exception as exc:  # the caller of `hear` raises it
            outputs.put_nowait(exc)


async def _inputs(pieces: asyncio.Queue[Any]) -> AsyncGenerator[Any, None]:
    while (piece := await pieces.get()) is not None:
        yield piece


def _length(piece: Any) -> int:
    """Tokens a rendered piece puts in the context (media expanded)."""
    return len(piece["prompt_token_ids"])
