"""A text-in backend's sessions around one loaded voice, on a worker's threads."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor

from antiphon.stage1.backends import BackendContext
from antiphon.stage1.service import Emit, SessionFactory
from antiphon.stage1.speech.scheduler import SynthesisScheduler
from antiphon.stage1.speech.synthesis import SynthesisSession
from antiphon.stage1.speech.voice import Voice


@contextlib.asynccontextmanager
async def voice_sessions(
    voice: Voice, context: BackendContext, *, parallel: int, close: Callable[[], None]
) -> AsyncIterator[SessionFactory]:
    """Sessions that synthesise with `voice`, `parallel` clauses at a time;
    `close` releases the voice after the last."""
    settings = context.settings
    executor = ThreadPoolExecutor(parallel, thread_name_prefix="tts")
    # Shared by the worker's sessions, first clauses first.
    scheduler = SynthesisScheduler(executor, context.metrics.queue_depth, parallel)

    def session(emit: Emit) -> SynthesisSession:
        return SynthesisSession(
            voice,
            scheduler,
            context.metrics,
            emit,
            first_clause_words=settings.first_clause_words,
            underrun_guard_ms=settings.underrun_guard_ms,
        )

    try:
        yield session
    finally:
        await scheduler.close()
        close()
        executor.shutdown(wait=False, cancel_futures=True)
