"""What the stage1 synthesis tests share: a recorder of a session's events
(`Heard`), and the `speaker` fixture's type (tests/stage1/conftest.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from antiphon.stage1.speech.synthesis import SynthesisSession
from antiphon.v1 import stage_pb2 as pb

# A session on the test's scheduler and voice thread; keywords are
# SynthesisSession's options (first_clause_words, underrun_guard_ms).
Speaker = Callable[..., SynthesisSession]


class Heard:
    """The session's events, and a wait for the one a test is after."""

    def __init__(self) -> None:
        self.events: list[pb.Stage1Event] = []
        self._changed = asyncio.Event()

    def __call__(self, event: pb.Stage1Event) -> None:
        self.events.append(event)
        self._changed.set()

    async def until(self, found: Callable[[], bool], timeout_s: float = 5) -> None:
        async with asyncio.timeout(timeout_s):
            while not found():
                self._changed.clear()
                await self._changed.wait()

    async def done(self, response_id: str) -> pb.SynthesisDone:
        await self.until(lambda: any(d.response_id == response_id for d in self.dones))
        return next(d for d in self.dones if d.response_id == response_id)

    @property
    def audio(self) -> list[pb.AudioChunk]:
        return [e.audio for e in self.events if e.HasField("audio")]

    @property
    def dones(self) -> list[pb.SynthesisDone]:
        return [e.done for e in self.events if e.HasField("done")]

    @property
    def errors(self) -> list[pb.StageError]:
        return [e.error for e in self.events if e.HasField("error")]

    def texts(self, response_id: str) -> list[str]:
        return [a.text for a in self.audio if a.response_id == response_id]


def text(response_id: str, words: str, *, epoch: int = 0, final: bool = False) -> pb.Stage1Request:
    return pb.Stage1Request(
        text=pb.SynthesizeText(epoch=epoch, response_id=response_id, text=words, final=final)
    )
