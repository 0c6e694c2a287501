"""What one GPT-Live socket knows of its session, shared by its two halves.

The inbound half writes what the client said (the start, the mute, the
ids a later server event answers); the outbound half writes what the
session said (its state, which backend it has). The timeline is made at
the start, when the input format is known. Nothing here outlives the
socket: GPT-Live has no resume, so a new socket is a new session. A
connection that sidebands may attach to has a `tap` (tap.py), which sees
the input as it arrived and the track as the timeline releases it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from antiphon.gateway.dialects.halves import Json, Lent
from antiphon.gateway.live.delegation import Delegation
from antiphon.gateway.live.start_config import StartConfig, format_json
from antiphon.gateway.live.tap import Tap
from antiphon.gateway.live.timeline import Timeline
from antiphon.gateway.live.track_format import TrackFormat
from antiphon.v1 import session_pb2 as spb


@dataclass
class LiveState:
    lent: Lent
    config: StartConfig | None = None
    timeline: Timeline | None = None
    # The session as `session.started` told it (its backend's capabilities).
    session: spb.SessionState | None = None
    muted: bool = False
    # Who answers a handed-off task; the one setting a `session.update` changes.
    delegation: Delegation | None = None
    # The client's ids that `session.started` and `session.closed` answer.
    start_event_id: str = ""
    close_event_id: str = ""
    tap: Tap | None = None
    _held: list[Json] = field(default_factory=list)

    def start(self, config: StartConfig, event_id: str) -> None:
        self.config = config
        self.delegation = config.delegation
        self.start_event_id = event_id
        fmt = config.audio_format
        convert: Callable[[bytes], bytes] = TrackFormat(fmt).convert
        if self.tap is not None:
            convert = self.tap.track(convert)
        self.timeline = Timeline(fmt.sample_rate_hz, convert)

    def reflect(self, pcm16: bytes) -> None:
        """The client's audio as it arrived, before any mute, for the sidebands."""
        if self.tap is not None and self.config is not None:
            self.tap.heard(pcm16, self.config.audio_format.sample_rate_hz)

    def say(self, frames: list[Json]) -> None:
        """Frames of the dialect's own; held until `session.started` went out,
        which comes first (a client may append before it has read it)."""
        if self.session is None:
            self._held += frames
            return
        for frame in frames:
            self.lent.say(frame)

    def started(self, st: spb.SessionState) -> list[Json]:
        """The session started: what was held goes out after its answer."""
        self.session = st
        held, self._held = self._held, []
        return held

    def delegate_model(self) -> str:
        """The Responses model the delegation names (echoed in its events)."""
        d = self.delegation
        return str(d.responses.get("model", "")) if d is not None else ""

    def resource(self) -> Json:
        """The session resource: what the session says, in GPT-Live's shape."""
        st, config = self.session, self.config
        if st is None or config is None:
            return {"id": "", "expires_at": 0, "model": "", "status": "active"}
        out: Json = {
            "id": st.session_id,
            "expires_at": st.expires_at,
            "model": st.config.model,
            "status": "active",
            "instructions": st.config.instructions,
            "audio": {
                "format": format_json(config.audio_format),
                "output": {"voice": st.config.voice},
            },
            "delegation": self.delegation.resource() if self.delegation else None,
            "input": [],
            "store": False,
        }
        if config.safety_identifier is not None:
            out["safety_identifier"] = config.safety_identifier
        return out
