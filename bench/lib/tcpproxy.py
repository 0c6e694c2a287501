"""A TCP proxy on loopback that can cut its link: drop every connection, refuse new ones.

`bench/faults/` points a gateway's `session_address` (and its fallbacks)
at proxies like this one, so the gateway's link to the session tier can be
cut while both ends stay up: what a network partition looks like to them.
"""

from __future__ import annotations

import asyncio
import contextlib


class TcpProxy:
    """Forwards `127.0.0.1:<port>` to `upstream` byte for byte, until `cut`."""

    def __init__(self, upstream: tuple[str, int], port: int) -> None:
        self.upstream = upstream
        self.port = port
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self.connections = 0

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(
            self._accept, "127.0.0.1", self.port, reuse_address=True
        )

    async def cut(self, seconds: float) -> None:
        """Drop every connection at once (no goodbye) and refuse new ones for `seconds`."""
        await self._stop_listening()
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()
        await asyncio.sleep(seconds)
        await self.start()

    async def close(self) -> None:
        await self._stop_listening()
        for writer in list(self._writers):
            writer.transport.abort()

    async def _stop_listening(self) -> None:
        if self._server is not None:
            # Closed, not paused: a connect now gets ECONNREFUSED, as from a dead host's port.
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 1.0)
            self._server = None

    async def _accept(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            up_r, up_w = await asyncio.open_connection(*self.upstream)
        except OSError:
            client_w.transport.abort()  # the upstream refuses: so do we
            return
        self.connections += 1
        pair = {client_w, up_w}
        self._writers |= pair
        try:
            await asyncio.gather(_pipe(client_r, up_w), _pipe(up_r, client_w))
        finally:
            self._writers -= pair
            for w in pair:
                w.transport.abort()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        # One direction ended: so does the other, as when a real link goes.
        writer.transport.abort()
