"""Entry point: `python -m antiphon.gateway.main`."""

from __future__ import annotations

import uvicorn

from antiphon.common import config, logs, tracing
from antiphon.gateway.app import create_app
from antiphon.gateway.settings import GatewaySettings


def main() -> None:
    settings = config.load(GatewaySettings)
    logs.configure("gateway", settings.log_level)
    tracing.configure("gateway", settings.otlp_endpoint)
    uvicorn.run(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        log_config=None,
        # Clients send ~13 KB appends; the default 16 MiB cap is far above it.
        ws_max_size=settings.max_message_bytes,
        timeout_graceful_shutdown=int(settings.shutdown_grace_s),
    )


if __name__ == "__main__":
    main()
