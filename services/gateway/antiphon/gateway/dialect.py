"""The two JSON dialects a socket may speak over the same typed session stream."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from antiphon.gateway import native
from antiphon.gateway.projector import Json, project
from antiphon.v1 import session_pb2 as spb

Projector = Callable[[spb.ServerEvent], Json]


@dataclass(frozen=True)
class Dialect:
    """How one route names events: inbound renames, outbound projection."""

    name: str
    # Client event -> the event the translator validates (identity for Realtime).
    normalize: Callable[[Json], Json]
    # A fresh projector per connection, so a projector may keep per-socket state.
    projector: Callable[[], Projector]


def _same(event: Json) -> Json:
    return event


REALTIME = Dialect("realtime", _same, lambda: project)
NATIVE = Dialect("native", native.normalize, lambda: native.project_native)
