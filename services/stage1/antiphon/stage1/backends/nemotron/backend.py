"""The `nemotron` backend's entry in the registry: Nemotron VoiceChat's
speaking half (EAR-TTS and its codec), stepped in lockstep over a batch of
`capacity` sessions, one frame (the LLM's text token) a step."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from antiphon.stage1.backends import Backend, BackendContext
from antiphon.stage1.backends.nemotron import lockstep as nemotron_lockstep
from antiphon.stage1.frames.session import FrameForm, FrameSession
from antiphon.stage1.metrics import DuplexMetrics
from antiphon.stage1.service import Emit, SessionFactory
from antiphon.v1 import common_pb2 as cpb

# No audio truncation: EAR-TTS speaks a frame's token some frames after it
# reads it, so a chunk's text does not end with its audio and no mark may
# say it does.
CAPABILITIES = cpb.Capabilities(model_native=True)


@contextlib.asynccontextmanager
async def open_sessions(context: BackendContext) -> AsyncIterator[SessionFactory]:
    lockstep = nemotron_lockstep.load(context.settings, DuplexMetrics(context.registry))
    form = FrameForm(reads="tokens", rate=lockstep.rate, frame_ms=lockstep.frame_ms, marks=False)
    # A dead step loop strands every session here: the worker stops, so they move.
    lockstep.start(context.on_failure)

    def session(emit: Emit) -> FrameSession:
        return FrameSession(lockstep, context.metrics, emit, form)

    try:
        yield session
    finally:
        await lockstep.close()


BACKEND = Backend(capabilities=CAPABILITIES, open=open_sessions)
