"""The JSON dialects a socket may speak over the same typed session stream.

- `OPENAI`: `/v1/realtime` with no opt-in, exactly OpenAI's GA protocol
  (`openai_dialect`): the session opens as the socket is accepted, and only
  OpenAI's types and shapes cross the wire.
- `DUPLEX`: `/v1/realtime?duplex=1`, the reference's contract: OpenAI's names
  plus the duplex extensions (`projector`); the session opens on the first
  `session.update` (or `session.resume`).
- `NATIVE`: `/v1/duplex`, the runner's own names (`native`), opening as `DUPLEX`.
- `LIVE`: `/v1/live/sessions`, OpenAI's GPT-Live (`antiphon.gateway.live`):
  opens on the client's `session.start`; its halves share a timeline
  (`halves`), so it builds both per connection.

The session service never knows which one a client speaks.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from antiphon.gateway.dialects import native
from antiphon.gateway.dialects.halves import Interpreter, Lent, Projector
from antiphon.gateway.dialects.openai_dialect import CLIENT_TYPES, OpenAIProjector
from antiphon.gateway.dialects.projector import project
from antiphon.gateway.dialects.shapes import Json
from antiphon.gateway.live.inbound import CLIENT_TYPES as LIVE_TYPES
from antiphon.gateway.live.inbound import LiveInterpreter
from antiphon.gateway.live.live_state import LiveState
from antiphon.gateway.live.outbound import LiveProjector
from antiphon.gateway.live.tap import Tap
from antiphon.gateway.translate.session_patch import query_flag
from antiphon.gateway.translate.translator import Translator
from antiphon.v1 import session_pb2 as spb


@dataclass(frozen=True)
class Dialect:
    """How one route speaks: inbound renames and types, opening, outbound projection."""

    name: str
    # Client event -> the event the translator validates (identity but for native).
    normalize: Callable[[Json], Json]
    # A fresh projector per connection, so a projector may keep per-socket state.
    projector: Callable[[], Projector] | None
    # Open the session as the socket is accepted (OpenAI sends `session.created`
    # on connect), not on the client's first `session.update`.
    opens_on_connect: bool = False
    # The client event types it takes, as sent; None: all the translator knows.
    # (GPT-Live's, which its own interpreter reads, name its metric labels.)
    client_types: frozenset[str] | None = None
    # Both halves at once, for a dialect whose halves share state (else the
    # `Translator` and `projector`).
    halves: Callable[[Lent], tuple[Interpreter, Projector]] | None = None

    def connection_halves(self, lent: Lent) -> tuple[Interpreter, Projector]:
        """One connection's inbound and outbound halves."""
        if self.halves is not None:
            return self.halves(lent)
        assert self.projector is not None  # a dialect has one or the other
        return Translator(self.client_types, lent.pinned), self.projector()


def _same(event: Json) -> Json:
    return event


def _one(project: Callable[[spb.ServerEvent], Json]) -> Callable[[], Projector]:
    """A projector of one frame per event, with no per-socket state."""
    return lambda: lambda ev: [project(ev)]


OPENAI = Dialect("openai", _same, OpenAIProjector, opens_on_connect=True, client_types=CLIENT_TYPES)
DUPLEX = Dialect("duplex", _same, _one(project))
NATIVE = Dialect("native", native.normalize, _one(native.project_native))


def _live_halves(lent: Lent, tap: Tap | None = None) -> tuple[Interpreter, Projector]:
    state = LiveState(lent, tap=tap)
    return LiveInterpreter(state), LiveProjector(state)


LIVE = Dialect("live", _same, None, client_types=LIVE_TYPES, halves=_live_halves)


def live_dialect(tap: Tap) -> Dialect:
    """GPT-Live for one connection whose sidebands `tap` feeds (live/tap.py)."""
    return replace(LIVE, halves=lambda lent: _live_halves(lent, tap))


def realtime_dialect(query: Mapping[str, str]) -> Dialect:
    """`/v1/realtime`'s dialect: the duplex extensions with `?duplex=1`, else OpenAI's."""
    return DUPLEX if query_flag(query.get("duplex", "")) else OPENAI
