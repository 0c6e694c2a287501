"""One session's requests on the `mimi` backend (frames/session.py): its
frames' audio codes are what Mimi decodes, at Mimi's 24 kHz, and each 80 ms
chunk's text ends with its audio (a mark per chunk)."""

from __future__ import annotations

from collections.abc import Callable

from antiphon.common.moshi_checkpoint import FRAME_MS, SAMPLE_RATE
from antiphon.stage1.frames.session import Decoder, FrameForm, FrameSession
from antiphon.stage1.metrics import Stage1Metrics
from antiphon.v1 import stage_pb2 as pb

FORM = FrameForm(reads="codes", rate=SAMPLE_RATE, frame_ms=FRAME_MS, marks=True)


class MimiSession(FrameSession):
    def __init__(
        self,
        lockstep: Decoder,
        metrics: Stage1Metrics,
        emit: Callable[[pb.Stage1Event], None],
    ) -> None:
        super().__init__(lockstep, metrics, emit, FORM)
