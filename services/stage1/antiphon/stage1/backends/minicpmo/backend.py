"""The `minicpmo` backend's entry in the registry: MiniCPM-o 4.5's speaking
half, the talker and token2wav, one unit (a second) of a session's speech
at a time (session.py, voice.py)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from antiphon.stage1.backends import Backend, BackendContext
from antiphon.stage1.backends.minicpmo import voice as minicpmo_voice
from antiphon.stage1.backends.minicpmo.session import UnitMetrics, UnitSession
from antiphon.stage1.service import Emit, SessionFactory
from antiphon.v1 import common_pb2 as cpb

# One mark per unit's chunk: the unit's text is what its second of audio says,
# to within what token2wav holds back for the next (some 150 ms).
CAPABILITIES = cpb.Capabilities(supports_audio_truncate=True, model_native=True)


@contextlib.asynccontextmanager
async def open_sessions(context: BackendContext) -> AsyncIterator[SessionFactory]:
    units = UnitMetrics(context.registry)
    voice = await asyncio.to_thread(
        minicpmo_voice.load, context.settings, units.batch_units.observe
    )

    def session(emit: Emit) -> UnitSession:
        return UnitSession(voice, context.metrics, units, emit)

    try:
        yield session
    finally:
        voice.close()


BACKEND = Backend(capabilities=CAPABILITIES, open=open_sessions)
