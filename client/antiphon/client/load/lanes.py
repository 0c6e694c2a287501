"""The lanes a load session can take: the session each opens with, by name."""

from __future__ import annotations

from typing import Any

MANUAL: dict[str, Any] = {"type": "realtime", "audio": {"input": {"turn_detection": None}}}
SERVER_VAD: dict[str, Any] = {
    "type": "realtime",
    "audio": {"input": {"turn_detection": {"type": "server_vad"}}},
}
# The server's semantic end of turn (`eagerness` left out: its default, `auto`);
# on the client the `server_vad` lane's live microphone.
SEMANTIC_VAD: dict[str, Any] = {
    "type": "realtime",
    "audio": {"input": {"turn_detection": {"type": "semantic_vad"}}},
}
# The native duplex lane (docs/realtime.md): the model listens while the user
# speaks and answers speech followed by silence; no commit, no server VAD turns.
NATIVE: dict[str, Any] = {
    "type": "realtime",
    "audio": {"input": {"turn_detection": None}},
    "extra_body": {"native_duplex": True},
}
LANES: dict[str, dict[str, Any]] = {
    "manual": MANUAL,
    "server_vad": SERVER_VAD,
    "semantic_vad": SEMANTIC_VAD,
    "native": NATIVE,
}


def lane_session(
    lane: str, silence_ms: int | None = None, eagerness: str | None = None
) -> dict[str, Any]:
    """The session a lane opens; `silence_ms` sets server_vad's `silence_duration_ms`
    (the server's default otherwise), the wait after speech before the turn ends, and
    `eagerness` semantic_vad's (`auto` otherwise)."""
    if silence_ms is None and eagerness is None:
        return LANES[lane]
    if silence_ms is not None and lane != "server_vad":
        raise ValueError("silence_ms is server_vad's setting")
    if eagerness is not None and lane != "semantic_vad":
        raise ValueError("eagerness is semantic_vad's setting")
    setting = (
        {"silence_duration_ms": silence_ms} if silence_ms is not None else {"eagerness": eagerness}
    )
    session = LANES[lane]
    detection = session["audio"]["input"]["turn_detection"] | setting
    return session | {"audio": {"input": {"turn_detection": detection}}}
