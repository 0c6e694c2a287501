"""Entry point: `python -m antiphon.gateway.main`.

SIGTERM drains before uvicorn stops (`DrainingServer`): uvicorn's own
shutdown would close every WebSocket at once with 1012 and only then tell
the application, so the drain (`antiphon.gateway.drain`) runs first and
uvicorn's shutdown finds the sockets already closed.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from types import FrameType

import uvicorn

from antiphon.common import config, logs, tracing
from antiphon.gateway.app import create_app
from antiphon.gateway.drain import Drain
from antiphon.gateway.settings import GatewaySettings

log = logging.getLogger(__name__)

# Of the drain window, what uvicorn's own shutdown keeps for what the drain
# leaves (plain HTTP requests, a socket that did not close in time).
UVICORN_SHUTDOWN_S = 1.0


class DrainingServer(uvicorn.Server):
    """uvicorn, whose first SIGTERM/SIGINT drains the gateway and then exits
    cleanly (status 0); a second signal is uvicorn's own (SIGINT: at once)."""

    def __init__(self, config: uvicorn.Config, drain: Drain, grace_s: float) -> None:
        super().__init__(config)
        self._drain = drain
        self._grace_s = grace_s
        self._loop: asyncio.AbstractEventLoop | None = None
        self._draining: asyncio.Task[None] | None = None

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().serve(sockets)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self._loop is None or self._draining is not None or self.should_exit:
            super().handle_exit(sig, frame)
            return
        # A signal handler runs between two bytecodes of whatever the loop was
        # doing: the drain starts from the loop's own next turn. The signal is
        # not recorded for uvicorn to raise again at the end, so a drained
        # gateway exits 0 instead of dying of the signal.
        self._loop.call_soon_threadsafe(self._start_drain)

    def _start_drain(self) -> None:
        if self._draining is None:
            self._draining = asyncio.create_task(self._drain_then_exit())

    async def _drain_then_exit(self) -> None:
        try:
            await self._drain.run(max(self._grace_s - UVICORN_SHUTDOWN_S, 0.0))
        except Exception:
            log.exception("drain failed")
        self.should_exit = True


def main() -> None:
    settings = config.load(GatewaySettings)
    logs.configure("gateway", settings.log_level)
    tracing.configure("gateway", settings.otlp_endpoint)
    app = create_app(settings)
    server_config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_config=None,
        # The protocol's own cap, a little above the gateway's (`Connection`),
        # so a frame just past the limit gets the typed `message_too_large`
        # and one far past it is cut off by the protocol (1009) unread.
        ws_max_size=settings.max_message_bytes + 1024 * 1024,
        timeout_graceful_shutdown=int(UVICORN_SHUTDOWN_S),
    )
    DrainingServer(server_config, app.state.drain, settings.shutdown_grace_s).run()


if __name__ == "__main__":
    main()
