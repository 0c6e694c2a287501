"""Entry point: `python -m antiphon.stage1.main`."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor

from prometheus_client import CollectorRegistry

from antiphon.common import bootstrap, config, loop_lag, metrics, workers
from antiphon.common.binding import ActiveSessions
from antiphon.common.grpcserver import GrpcApp
from antiphon.stage1 import mimi_lockstep, processes
from antiphon.stage1.assets import locate
from antiphon.stage1.metrics import DuplexMetrics, Stage1Metrics
from antiphon.stage1.mimi_session import MimiSession
from antiphon.stage1.scheduler import SynthesisScheduler
from antiphon.stage1.service import Emit, SessionFactory, Stage1Service
from antiphon.stage1.settings import Stage1Settings
from antiphon.stage1.synthesis import SynthesisSession, Voice
from antiphon.stage1.synthetic import SyntheticTts
from antiphon.stage1.tts import Batched, PiperTts
from antiphon.v1 import common_pb2 as cpb
from antiphon.v1 import stage_pb2_grpc

SERVICE_NAME = "antiphon.v1.Stage1Service"
BACKENDS = ("piper", "synthetic", "mimi")

# Every backend's chunks carry text marks, so playback positions map to text.
TEXT_CAPABILITIES = cpb.Capabilities(supports_audio_truncate=True)
# One mark per 80 ms chunk: the frame's text ends with its audio.
MIMI_CAPABILITIES = cpb.Capabilities(supports_audio_truncate=True, model_native=True)


def load_voice(settings: Stage1Settings, stage_metrics: Stage1Metrics) -> Voice:
    if settings.backend == "piper":
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
    if settings.backend == "synthetic":
        return SyntheticTts(
            out_rate=settings.output_rate,
            ms_per_char=settings.synthetic_ms_per_char,
            compute_ratio=settings.synthetic_compute_ratio,
        )
    raise SystemExit(f"unknown stage1 backend {settings.backend!r}; use one of {BACKENDS}")


@contextlib.asynccontextmanager
async def text_backend(
    settings: Stage1Settings, stage_metrics: Stage1Metrics
) -> AsyncIterator[SessionFactory]:
    tts = load_voice(settings, stage_metrics)
    # onnxruntime's voice uses the one thread it is given: one synthesis at a
    # time per worker. A batched voice needs a batch's worth of callers.
    parallel = settings.tts_max_batch if settings.tts_engine == "torch" else 1
    executor = ThreadPoolExecutor(parallel, thread_name_prefix="tts")
    # Shared by the worker's sessions, first clauses first.
    scheduler = SynthesisScheduler(executor, stage_metrics.queue_depth, parallel)

    def session(emit: Emit) -> SynthesisSession:
        return SynthesisSession(
            tts,
            scheduler,
            stage_metrics,
            emit,
            first_clause_words=settings.first_clause_words,
            underrun_guard_ms=settings.underrun_guard_ms,
        )

    try:
        yield session
    finally:
        await scheduler.close()
        if isinstance(tts, PiperTts):
            tts.close()  # its batch thread, if it has one
        executor.shutdown(wait=False, cancel_futures=True)


@contextlib.asynccontextmanager
async def mimi_backend(
    settings: Stage1Settings,
    stage_metrics: Stage1Metrics,
    registry: CollectorRegistry,
    on_failure: Callable[[], None],
) -> AsyncIterator[SessionFactory]:
    lockstep = mimi_lockstep.load(settings, DuplexMetrics(registry))
    lockstep.start(on_failure)

    def session(emit: Emit) -> MimiSession:
        return MimiSession(lockstep, stage_metrics, emit)

    try:
        yield session
    finally:
        await lockstep.close()


async def serve(settings: Stage1Settings) -> None:
    registry = metrics.service_registry()
    stage_metrics = Stage1Metrics(registry)
    stage_metrics.capacity.set(settings.capacity)
    app = GrpcApp(SERVICE_NAME, settings.listen)
    if settings.backend == "mimi":
        # A dead step loop strands every session here: stop, so they move.
        backend = mimi_backend(settings, stage_metrics, registry, app.stopping.set)
        capabilities = MIMI_CAPABILITIES
    else:
        backend = text_backend(settings, stage_metrics)
        capabilities = TEXT_CAPABILITIES
    async with backend as sessions:
        metrics.serve(registry, settings.metrics_port)
        active = ActiveSessions(stage_metrics.sessions_active, capacity=settings.capacity)
        service = Stage1Service(
            sessions=sessions, capabilities=capabilities, settings=settings, active=active
        )
        stage_pb2_grpc.add_Stage1ServiceServicer_to_server(service, app.server)
        await app.start()
        await app.set_ready(True)
        # Listed in the worker registry only once ready; on SIGTERM it stops
        # taking binds (and says so there) before the server's stop grace.
        async with (
            workers.registered(settings, "stage1", active),
            loop_lag.watching(stage_metrics.loop_lag),
        ):
            await app.run(grace_s=settings.shutdown_grace_s, on_drain=active.drain)


def main() -> None:
    settings = config.load(Stage1Settings)
    bootstrap.configure("stage1", settings)
    if settings.worker_processes > 1:
        processes.supervise(settings, serve)
    else:
        asyncio.run(serve(settings))


if __name__ == "__main__":
    main()
