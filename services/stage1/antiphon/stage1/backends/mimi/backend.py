"""The `mimi` backend's entry in the registry: one Mimi decoder, stepped in
lockstep over a batch of `capacity` sessions."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from antiphon.stage1.backends import Backend, BackendContext
from antiphon.stage1.backends.mimi import lockstep as mimi_lockstep
from antiphon.stage1.backends.mimi.session import MimiSession
from antiphon.stage1.metrics import DuplexMetrics
from antiphon.stage1.service import Emit, SessionFactory
from antiphon.v1 import common_pb2 as cpb

# One mark per 80 ms chunk: the frame's text ends with its audio.
CAPABILITIES = cpb.Capabilities(supports_audio_truncate=True, model_native=True)


@contextlib.asynccontextmanager
async def open_sessions(context: BackendContext) -> AsyncIterator[SessionFactory]:
    lockstep = mimi_lockstep.load(context.settings, DuplexMetrics(context.registry))
    # A dead step loop strands every session here: the worker stops, so they move.
    lockstep.start(context.on_failure)

    def session(emit: Emit) -> MimiSession:
        return MimiSession(lockstep, context.metrics, emit)

    try:
        yield session
    finally:
        await lockstep.close()


BACKEND = Backend(capabilities=CAPABILITIES, open=open_sessions)
