"""Entry point: `python -m antiphon.stage1.main`."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from antiphon.common import bootstrap, loop_lag, metrics, workers
from antiphon.common.binding import ActiveSessions
from antiphon.common.grpcserver import GrpcApp
from antiphon.stage1.assets import locate
from antiphon.stage1.metrics import Stage1Metrics
from antiphon.stage1.service import Stage1Service
from antiphon.stage1.settings import Stage1Settings
from antiphon.stage1.synthesis import Voice
from antiphon.stage1.synthetic import SyntheticTts
from antiphon.stage1.tts import PiperTts
from antiphon.v1 import stage_pb2_grpc

SERVICE_NAME = "antiphon.v1.Stage1Service"


def load_voice(settings: Stage1Settings) -> Voice:
    if settings.backend == "piper":
        assets = locate()
        return PiperTts(
            assets.voice_onnx,
            assets.voice_config,
            threads=settings.tts_threads,
            out_rate=settings.output_rate,
        )
    if settings.backend == "synthetic":
        return SyntheticTts(
            out_rate=settings.output_rate,
            ms_per_char=settings.synthetic_ms_per_char,
            compute_ratio=settings.synthetic_compute_ratio,
        )
    raise SystemExit(f"unknown stage1 backend {settings.backend!r}; use piper or synthetic")


async def serve(settings: Stage1Settings) -> None:
    tts = load_voice(settings)
    registry = metrics.service_registry()
    stage_metrics = Stage1Metrics(registry)
    stage_metrics.capacity.set(settings.capacity)
    metrics.serve(registry, settings.metrics_port)
    # One synthesis at a time per worker: the voice uses the thread it is given.
    executor = ThreadPoolExecutor(1, thread_name_prefix="tts")
    active = ActiveSessions(stage_metrics.sessions_active, capacity=settings.capacity)
    service = Stage1Service(
        tts=tts, executor=executor, settings=settings, metrics=stage_metrics, active=active
    )
    app = GrpcApp(SERVICE_NAME, settings.listen)
    stage_pb2_grpc.add_Stage1ServiceServicer_to_server(service, app.server)
    await app.start()
    await app.set_ready(True)
    try:
        # Listed in the worker registry only once ready; on SIGTERM it stops
        # taking binds (and says so there) before the server's stop grace.
        async with (
            workers.registered(settings, "stage1", active),
            loop_lag.watching(stage_metrics.loop_lag),
        ):
            await app.run(grace_s=settings.shutdown_grace_s, on_drain=active.drain)
    finally:
        executor.shutdown(wait=False, cancel_futures=True)


def main() -> None:
    bootstrap.run("stage1", Stage1Settings, serve)


if __name__ == "__main__":
    main()
