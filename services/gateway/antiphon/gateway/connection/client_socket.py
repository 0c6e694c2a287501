"""What a connection reads and writes its client through: a WebSocket, or a
WebRTC call (calls/call_socket.py) that plays the answer's audio itself."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from starlette.websockets import WebSocket

from antiphon.v1 import session_pb2 as spb


class AudioOut(Protocol):
    """Where a socket that plays audio itself puts the answer's audio."""

    def play(self, delta: spb.AudioDelta) -> None: ...


class ClientSocket(Protocol):
    """What a connection reads and writes its client's events through: a
    WebSocket (`WebSocketClient`), or a WebRTC call's data channel and
    media (call_socket.CallSocket). `receive` gives ASGI WebSocket messages
    (`websocket.receive` with `text`, or `websocket.disconnect`), or a
    command the socket typed itself (a call's microphone audio)."""

    @property
    def query_params(self) -> Mapping[str, str]: ...

    @property
    def audio_out(self) -> AudioOut | None:
        """Set where the answer's audio is played by the socket, not sent as events."""

    async def receive(self) -> Mapping[str, Any] | spb.ClientCommand: ...

    async def send(self, kind: str, text: str) -> None:
        """One server event: its type, and its JSON."""

    async def close(self, code: int, reason: str | None) -> None: ...


class WebSocketClient:
    """A Starlette WebSocket as a `ClientSocket`."""

    def __init__(self, ws: WebSocket) -> None:
        self._ws = ws

    @property
    def query_params(self) -> Mapping[str, str]:
        return self._ws.query_params

    @property
    def audio_out(self) -> AudioOut | None:
        return None

    async def receive(self) -> Mapping[str, Any]:
        return await self._ws.receive()

    async def send(self, kind: str, text: str) -> None:
        await self._ws.send_text(text)

    async def close(self, code: int, reason: str | None) -> None:
        await self._ws.close(code, reason)
