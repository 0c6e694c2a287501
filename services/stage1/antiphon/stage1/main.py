"""Entry point: `python -m antiphon.stage1.main`.

Serves the backend named by the `backend` setting, loaded from the registry
(backends/__init__.py) and imported only then.
"""

from __future__ import annotations

import asyncio

from antiphon.common import bootstrap, config, loop_lag, metrics, workers
from antiphon.common.binding import ActiveSessions
from antiphon.common.grpcserver import GrpcApp
from antiphon.stage1 import backends, duplex_front_ends, processes
from antiphon.stage1.metrics import Stage1Metrics
from antiphon.stage1.service import Stage1Service
from antiphon.stage1.settings import Stage1Settings
from antiphon.v1 import stage_pb2_grpc

SERVICE_NAME = "antiphon.v1.Stage1Service"


async def serve(settings: Stage1Settings, *, backend: backends.Backend | None = None) -> None:
    """One worker; with `backend`, one of several on a duplex stepper
    (duplex_front_ends.py), whose decoder it is instead of the settings' own."""
    on_failure_now = backend is not None
    if backend is None:
        try:
            backend = backends.load(settings.backend)  # imports that backend only
        except backends.UnknownBackendError as exc:
            raise SystemExit(str(exc)) from None
    registry = metrics.service_registry()
    stage_metrics = Stage1Metrics(registry)
    stage_metrics.capacity.set(settings.capacity)
    app = GrpcApp(SERVICE_NAME, settings.listen)
    context = backends.BackendContext(
        settings=settings,
        metrics=stage_metrics,
        registry=registry,
        # A front end whose stepper is gone ends its streams at once.
        on_failure=app.abandon if on_failure_now else app.stopping.set,
    )
    async with backend.open(context) as sessions:
        metrics.serve(registry, settings.metrics_port)
        active = ActiveSessions(
            stage_metrics.sessions_active,
            capacity=settings.capacity,
            overflows=stage_metrics.outbox_overflows,
        )
        service = Stage1Service(
            sessions=sessions, capabilities=backend.capabilities, settings=settings, active=active
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
    try:
        backends.module_for(settings.backend)  # an unknown name fails here, before any worker
    except backends.UnknownBackendError as exc:
        raise SystemExit(str(exc)) from None
    if settings.duplex_front_ends > 1:
        duplex_front_ends.supervise(settings, serve)
    elif settings.worker_processes > 1:
        processes.supervise(settings, serve)
    else:
        asyncio.run(serve(settings))


if __name__ == "__main__":
    main()
