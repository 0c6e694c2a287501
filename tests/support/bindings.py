"""Stage bindings that keep what they were sent, for the session's parts alone."""

from __future__ import annotations

from typing import Any, cast

from antiphon.session.stage.stage_links import StageLinks
from antiphon.session.stage.stages import Binding
from antiphon.v1 import stage_pb2


class Recording:
    def __init__(self, address: str) -> None:
        self.address = address
        self.sent: list[Any] = []
        self.closed = False

    def send(self, request: Any) -> None:
        self.sent.append(request)

    async def close(self) -> None:
        self.closed = True


def recording_links(
    session_id: str, *, epoch: int = 1, rebind: Any = None
) -> tuple[StageLinks, Recording, Recording]:
    """A session's stage links over two recording bindings (stage0's, stage1's)."""
    s0, s1 = Recording("w0:1"), Recording("w1:1")
    links = StageLinks(
        stage0=cast(Binding[Any], s0),
        stage1=cast(Binding[Any], s1),
        info=(stage_pb2.StageInfo(), stage_pb2.StageInfo()),
        epoch=epoch,
        rebind=rebind,
        stage0_open=lambda: stage_pb2.Stage0Open(session_id=session_id),
        stage1_open=lambda: stage_pb2.Stage1Open(session_id=session_id),
    )
    return links, s0, s1
