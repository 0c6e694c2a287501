"""MiniCPM-o 4.5's speaking half for one worker: the talker (talker.py) and
token2wav (token2wav.py) of one checkpoint, and what a session's turn keeps
between its units.

A turn is the model's, not a response's: it opens with the first unit the
thinker speaks and closes with the unit whose text holds `<|turn_eos|>`, as
the published code resets the talker's KV cache and token2wav's stream
there. A turn cut short (a cancel, a mute, a silence without its end) is
dropped: its few held-back samples belong to speech nobody hears any more.

Sessions' units are spoken in batches: a unit waits while the talker runs
a batch, then goes with every other unit that waited (up to `batch`),
through the talker in one forward a step and through token2wav's flow
together (talker.py, token2wav.py). Nothing waits for a batch to fill: a
unit that finds the talker idle goes at once, alone.

The two models are a pipeline, each on a thread of its own (neither is safe
to step from two threads): while token2wav voices one batch, the talker
makes the next one's codes, so a worker keeps up with as many sessions as
its slower model can serve, not as both in turn can. A session's next unit
never overtakes its last: it is sent once the last one's audio is back.
So a pipeline splits the speaking sessions into two batches, each paying
the models' fixed cost a step; where that cost is the CPU launching small
kernels (the threads then take turns on the interpreter, not overlap),
`pipeline=False` speaks one batch at a time, every waiting unit in it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import shutil
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from antiphon.common.assets import RANDOM_PREFIX

if TYPE_CHECKING:
    from antiphon.stage1.backends.minicpmo.talker import Talker, TalkerTurn
    from antiphon.stage1.backends.minicpmo.token2wav import Token2Wav, Token2WavStream
    from antiphon.stage1.settings import Stage1Settings

log = logging.getLogger(__name__)

# The talker's sampling temperature in the published code.
TEMPERATURE = 0.8


@dataclass
class Turn:
    """One turn of one session: the talker's cache and token2wav's stream."""

    talker: TalkerTurn
    audio: Token2WavStream


@dataclass
class _Waiting:
    turn: Turn
    tokens: list[int]
    spoken: asyncio.Future[npt.NDArray[np.float32]]


class Voice:
    def __init__(
        self,
        talker: Talker,
        token2wav: Token2Wav,
        *,
        turn_eos: int,
        vocabulary: int,
        temperature: float,
        seed: int | None,
        batch: int,
        pipeline: bool = True,
        on_batch: Callable[[int], None] = lambda units: None,
        random_folder: Path | None = None,
    ) -> None:
        self._talker = talker
        self._token2wav = token2wav
        self.turn_eos = turn_eos
        # Text ids the thinker may send (its vocabulary): others are a bad frame.
        self.vocabulary = vocabulary
        self.rate = token2wav.rate
        self._temperature = temperature
        self._seed = seed
        # A random checkpoint's folder, written for this worker.
        self._random_folder = random_folder
        self._talking = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="talker")
        self._voicing = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="token2wav")
        # Batches token2wav has yet to voice.
        self._voiced: set[asyncio.Task[None]] = set()
        self._batch = batch
        self._pipeline = pipeline
        self._waiting: deque[_Waiting] = deque()
        self._arrived = asyncio.Event()
        self._speaking: asyncio.Task[None] | None = None
        self._on_batch = on_batch

    def turn(self, key: int) -> Turn:
        """A new turn, its sampling seeded by the worker's seed and `key` (the
        session's own count of its turns), so that what other sessions do
        never changes it."""
        seed = (
            int(np.random.default_rng().integers(2**31))
            if self._seed is None
            else (self._seed + key) % 2**31
        )
        return Turn(
            self._talker.turn(seed=seed, temperature=self._temperature), self._token2wav.stream()
        )

    async def speak(self, turn: Turn, tokens: Sequence[int]) -> npt.NDArray[np.float32]:
        """One unit of `turn`: its text tokens spoken, as samples at `rate`,
        in the next batch. The unit whose text ends the turn flushes what
        token2wav held back. ValueError for ids the talker does not know."""
        if self._speaking is None:
            self._speaking = asyncio.create_task(self._speak_batches())
        spoken: asyncio.Future[npt.NDArray[np.float32]] = asyncio.get_running_loop().create_future()
        self._waiting.append(_Waiting(turn, list(tokens), spoken))
        self._arrived.set()
        return await spoken

    async def _speak_batches(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            while not self._waiting:
                self._arrived.clear()
                await self._arrived.wait()
            batch = [self._waiting.popleft() for _ in range(min(self._batch, len(self._waiting)))]
            units = [(waiting.turn, waiting.tokens) for waiting in batch]
            try:
                codes = await loop.run_in_executor(self._talking, self._talk, units)
            except Exception as exc:  # the batch as a whole failed
                log.exception("the talker failed a batch of %d", len(batch))
                _settle(batch, [exc] * len(batch))
                continue
            # Its thread voices batches in the order they come.
            voicing = loop.run_in_executor(self._voicing, self._voice, units, codes)
            task = asyncio.create_task(self._settle_voiced(batch, voicing))
            self._voiced.add(task)
            task.add_done_callback(self._voiced.discard)
            if not self._pipeline:
                # The next batch takes every unit that came meanwhile, this
                # one's sessions' next units among them.
                await asyncio.wait([task])

    async def _settle_voiced(
        self,
        batch: list[_Waiting],
        voicing: asyncio.Future[list[npt.NDArray[np.float32] | Exception]],
    ) -> None:
        try:
            results = await voicing
        except Exception as exc:
            log.exception("token2wav failed a batch of %d", len(batch))
            results = [exc] * len(batch)
        _settle(batch, results)

    def _talk(self, units: Sequence[tuple[Turn, list[int]]]) -> list[list[int] | Exception]:
        """On the talker's thread: each unit's codes, or the error that its
        own text is (the others are spoken all the same)."""
        from antiphon.stage1.backends.minicpmo.talker import TalkerUnit

        results: list[list[int] | Exception] = []
        good: list[int] = []
        for row, (_, tokens) in enumerate(units):
            try:
                self._talker.check(tokens, None)
                good.append(row)
                results.append([])
            except ValueError as exc:
                results.append(exc)
        if not good:
            return results
        self._on_batch(len(good))
        codes = self._talker.speak_batch(
            [
                TalkerUnit(units[row][0].talker, units[row][1], None, self._ends(units[row][1]))
                for row in good
            ]
        )
        for row, row_codes in zip(good, codes, strict=True):
            results[row] = row_codes
        return results

    def _voice(
        self, units: Sequence[tuple[Turn, list[int]]], codes: Sequence[list[int] | Exception]
    ) -> list[npt.NDArray[np.float32] | Exception]:
        """On token2wav's thread: each unit's samples from its codes."""
        good = [row for row, row_codes in enumerate(codes) if not isinstance(row_codes, Exception)]
        results: list[npt.NDArray[np.float32] | Exception] = [
            row_codes if isinstance(row_codes, Exception) else np.zeros(0, np.float32)
            for row_codes in codes
        ]
        pushes = []
        for row in good:
            row_codes = codes[row]
            assert not isinstance(row_codes, Exception)
            pushes.append((units[row][0].audio, row_codes, self._ends(units[row][1])))
        for row, samples in zip(good, self._token2wav.push_batch(pushes), strict=True):
            results[row] = samples
        return results

    def _ends(self, tokens: Sequence[int]) -> bool:
        """Whether a unit of these tokens ends its turn."""
        return self.turn_eos in tokens

    def close(self) -> None:
        if self._speaking is not None:
            self._speaking.cancel()
        for task in self._voiced:
            task.cancel()
        self._talking.shutdown(wait=True, cancel_futures=True)
        self._voicing.shutdown(wait=True, cancel_futures=True)
        if self._random_folder is not None:
            shutil.rmtree(self._random_folder, ignore_errors=True)


def _settle(
    batch: Sequence[_Waiting], results: Sequence[npt.NDArray[np.float32] | Exception]
) -> None:
    """Each waiting unit's audio, or its error."""
    for waiting, result in zip(batch, results, strict=True):
        if waiting.spoken.done():  # its session went away
            continue
        if isinstance(result, Exception):
            waiting.spoken.set_exception(result)
        else:
            waiting.spoken.set_result(result)


def load(settings: Stage1Settings, on_batch: Callable[[int], None] = lambda units: None) -> Voice:
    """The talker and token2wav of `settings.duplex_checkpoint`, with its tokenizer's
    `<|turn_eos|>`; `on_batch` hears how many units each batch spoke."""
    if not settings.duplex_checkpoint:
        raise SystemExit(
            "stage1 backend minicpmo needs duplex_checkpoint (ANTIPHON_DUPLEX_CHECKPOINT): "
            "the local MiniCPM-o 4.5 folder stage0 serves, random:4.5 or random:tiny"
        )
    import torch
    from transformers import AutoTokenizer

    from antiphon.common import moshi_checkpoint
    from antiphon.common.minicpmo import checkpoint as minicpmo_checkpoint
    from antiphon.common.minicpmo import four_five, tiny
    from antiphon.common.minicpmo import tokenizer as tok
    from antiphon.stage1.backends.minicpmo.talker import Talker
    from antiphon.stage1.backends.minicpmo.token2wav import Token2Wav, cache_dtype

    torch.set_num_threads(settings.duplex_threads)
    checkpoint = minicpmo_checkpoint.resolve(settings.duplex_checkpoint)
    device = str(moshi_checkpoint.device(settings.duplex_device))
    tokenizer = AutoTokenizer.from_pretrained(str(checkpoint.folder), trust_remote_code=True)
    if checkpoint.has_weights or not checkpoint.name.startswith(RANDOM_PREFIX):
        talker = Talker.load(checkpoint.folder, device=device, threads=settings.duplex_threads)
    else:  # random:4.5: drawn here, as vLLM draws the thinker's
        talker = Talker.drawn(checkpoint.folder, device=device, threads=settings.duplex_threads)
        four_five.write_voice(checkpoint.folder)
    token2wav = Token2Wav.load(
        checkpoint.folder / tiny.TOKEN2WAV_FOLDER,
        device=device,
        threads=settings.duplex_threads,
        cache_dtype=cache_dtype(settings.duplex_voice_cache, device),
    )
    turn_eos = tokenizer.convert_tokens_to_ids(tok.TURN_EOS)
    assert isinstance(turn_eos, int), turn_eos
    log.info(
        "minicpmo speech loaded",
        extra={
            "checkpoint": checkpoint.name,
            "device": device,
            "rate": token2wav.rate,
            "cache_dtype": token2wav.cache_dtype,
        },
    )
    temperature = settings.duplex_temperature
    return Voice(
        talker,
        token2wav,
        turn_eos=turn_eos,
        vocabulary=len(tokenizer),
        temperature=TEMPERATURE if temperature is None else temperature,
        seed=settings.duplex_seed,
        batch=settings.duplex_batch,
        pipeline=settings.duplex_voice_pipeline,
        on_batch=on_batch,
        random_folder=checkpoint.folder if checkpoint.name.startswith(RANDOM_PREFIX) else None,
    )
