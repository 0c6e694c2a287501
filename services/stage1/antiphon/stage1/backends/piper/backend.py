"""The `piper` backend's entry in the registry: a Piper voice, on onnxruntime
or (`tts_engine: torch`) batched in torch on `tts_device`."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from antiphon.stage1.backends import Backend, BackendContext
from antiphon.stage1.backends.piper.assets import locate
from antiphon.stage1.backends.piper.tts import Batched, PiperTts
from antiphon.stage1.service import SessionFactory
from antiphon.stage1.speech.sessions import voice_sessions
from antiphon.v1 import common_pb2 as cpb

# Its chunks carry text marks, so playback positions map to text.
CAPABILITIES = cpb.Capabilities(supports_audio_truncate=True)


def load_voice(context: BackendContext) -> PiperTts:
    settings, stage_metrics = context.settings, context.metrics
    assets = locate()
    batched = None
    if settings.tts_engine == "torch":
        batched = Batched(
            device=settings.tts_device,
            max_batch=settings.tts_max_batch,
            cuda_graphs=settings.tts_cuda_graphs,
            observe_graph_run=lambda how: stage_metrics.tts_graph_batches.labels(how).inc(),
            observe_batch=stage_metrics.tts_batch_size.observe,
            observe_wait=stage_metrics.tts_batch_wait.observe,
            observe_run=stage_metrics.tts_batch_run.observe,
        )
    tts = PiperTts(
        assets.voice_onnx,
        assets.voice_config,
        threads=settings.tts_threads,
        out_rate=settings.output_rate,
        batched=batched,
    )
    if batched is not None:
        tts.warm()
    return tts


@contextlib.asynccontextmanager
async def open_sessions(context: BackendContext) -> AsyncIterator[SessionFactory]:
    tts = load_voice(context)
    # onnxruntime's voice uses the one thread it is given: one synthesis at a
    # time per worker. A batched voice needs a batch's worth of callers.
    settings = context.settings
    parallel = settings.tts_max_batch if settings.tts_engine == "torch" else 1
    # close(): its batch thread, if it has one.
    async with voice_sessions(tts, context, parallel=parallel, close=tts.close) as sessions:
        yield sessions


BACKEND = Backend(capabilities=CAPABILITIES, open=open_sessions)
