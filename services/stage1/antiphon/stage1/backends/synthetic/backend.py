"""The `synthetic` backend's entry in the registry: Piper's contract at a fixed
cost per character, without a model."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from antiphon.stage1.backends import Backend, BackendContext
from antiphon.stage1.backends.synthetic.voice import SyntheticTts
from antiphon.stage1.service import SessionFactory
from antiphon.stage1.speech.sessions import voice_sessions
from antiphon.v1 import common_pb2 as cpb

# Its chunks carry text marks, as Piper's do.
CAPABILITIES = cpb.Capabilities(supports_audio_truncate=True)


@contextlib.asynccontextmanager
async def open_sessions(context: BackendContext) -> AsyncIterator[SessionFactory]:
    settings = context.settings
    voice = SyntheticTts(
        out_rate=settings.output_rate,
        ms_per_char=settings.synthetic_ms_per_char,
        compute_ratio=settings.synthetic_compute_ratio,
    )
    # One synthesis at a time per worker, as Piper on onnxruntime.
    async with voice_sessions(voice, context, parallel=1, close=lambda: None) as sessions:
        yield sessions


BACKEND = Backend(capabilities=CAPABILITIES, open=open_sessions)
