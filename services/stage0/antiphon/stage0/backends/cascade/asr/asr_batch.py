"""Every session's utterances on a worker, transcribed together.

A GPU runs Whisper on 64 utterances in not much more time than on one, so
the sessions of a worker do not each call the model: each `transcribe` waits
in one queue, and one batch at a time takes everything waiting (up to
`max_batch`). An utterance that arrives while a batch runs goes in the next
one, so a lone caller is never held back for company, and under load the
batches grow by themselves (continuous batching, as vLLM's is for the LLM).
The batch runs on one thread of its own: the event loop keeps serving.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from antiphon.stage0.backends.cascade.asr.whisper_torch import TorchWhisper


class BatchedAsr:
    def __init__(
        self,
        model: TorchWhisper,
        *,
        max_batch: int,
        observe_batch: Callable[[int], None] = lambda _size: None,
    ) -> None:
        self._model = model
        self._max_batch = max(1, max_batch)
        self._observe_batch = observe_batch
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="asr")
        self._waiting: list[tuple[bytes, asyncio.Future[str]]] = []
        self._task: asyncio.Task[None] | None = None

    async def transcribe(self, pcm16: bytes) -> str:
        """PCM16 mono 16 kHz in, its text out, once the batch it joined ran."""
        if not pcm16:
            return ""
        loop = asyncio.get_running_loop()
        heard: asyncio.Future[str] = loop.create_future()
        self._waiting.append((pcm16, heard))
        if self._task is None:
            self._task = loop.create_task(self._run())
        return await heard

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while True:
                # A caller that gave up (its session closed, a cancel) costs nothing.
                self._waiting = [(pcm, f) for pcm, f in self._waiting if not f.done()]
                if not self._waiting:
                    return
                batch = self._waiting[: self._max_batch]
                del self._waiting[: self._max_batch]
                self._observe_batch(len(batch))
                try:
                    texts = await loop.run_in_executor(
                        self._executor, self._model.transcribe, [pcm for pcm, _f in batch]
                    )
                except Exception as exc:
                    for _pcm, heard in batch:
                        if not heard.done():
                            heard.set_exception(exc)
                    continue
                for (_pcm, heard), text in zip(batch, texts, strict=True):
                    if not heard.done():
                        heard.set_result(text)
        finally:
            self._task = None

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for _pcm, heard in self._waiting:
            heard.cancel()
        self._executor.shutdown(wait=False, cancel_futures=True)
