"""A preemptive answer: asked for at the user's first pause, held out of sight,
used if the turn ends as the pause said it would.

Stage0 tells of a pause in the user's speech with the text so far
(`UtterancePause`). The answer that text would get is asked for at once,
under an id of its own, and its text goes on to stage1 to be spoken; but
nothing of it reaches the client or the history: stage0's and stage1's
results for it are held here. When the turn ends and its response would ask
stage0 for exactly what was asked already (the same messages, options and
tools, in the same epoch, from the same workers), the response takes the
answer over: what was held is replayed as its own and the rest flows as it
comes. Otherwise (speech resumed, another transcript, anything changed) it
is dropped on both stages and never seen. A preempted answer is no response:
it has no events, no items and no id a client could learn.

At most one per session, counted by outcome in
`antiphon_session_preemptive_answers_total`.
"""

from __future__ import annotations

from collections.abc import Callable

from antiphon.common.ids import new_id
from antiphon.session.stage.stage_links import StageLinks
from antiphon.v1 import stage_pb2

# What the stages send of an answer, held until it is used or dropped.
Held = (
    stage_pb2.GenerationDelta
    | stage_pb2.GenerationToolCall
    | stage_pb2.GenerationDone
    | stage_pb2.StageError
    | stage_pb2.AudioChunk
    | stage_pb2.SynthesisDone
)
# A pause held this long before the turn ended is a whole answer's worth of
# audio chunks; more means the turn is not ending, and the answer goes.
MAX_HELD = 2048


class Preemption:
    """The only holder of a session's preemptive answer."""

    def __init__(self, *, links: StageLinks, count: Callable[[str], None]) -> None:
        self._links = links
        # Outcomes: started, used, and the reason of each drop.
        self._count = count
        self._id = ""
        self._request = stage_pb2.Generate()
        self._speak = False
        self._rebinds = 0
        self._held: list[Held] = []

    def start(self, request: stage_pb2.Generate, *, speak: bool) -> None:
        """Ask stage0 for `request`'s answer now (and stage1 to speak it, if
        `speak`), in place of any preemptive answer before it."""
        self.drop("replaced")
        self._id = new_id("pre")
        self._request = stage_pb2.Generate()
        self._request.CopyFrom(request)
        self._request.response_id = self._id
        self._request.epoch = self._links.epoch
        self._speak = speak
        self._rebinds = self._links.rebinds
        self._held = []
        self._links.generate(self._request)
        self._count("started")

    def hold(self, msg: Held) -> bool:
        """Whether `msg` is the preemptive answer's (and so kept here, not delivered)."""
        if not self._id or msg.response_id != self._id:
            return False
        if len(self._held) >= MAX_HELD:
            self.drop("overflow")
            return True
        self._held.append(msg)
        if self._speak and isinstance(msg, stage_pb2.GenerationDelta) and msg.text:
            # Spoken as it comes; only the end of its text waits for the turn's end.
            self._links.synthesize(self._id, msg.text)
        return True

    def take(self, request: stage_pb2.Generate, *, speak: bool) -> tuple[str, list[Held]] | None:
        """The answer `request` would get (spoken or not, by `speak`), if it is
        the one asked for already: its stage id and what was held of it (it is
        no longer preemptive). Otherwise None, and the preemptive answer is dropped."""
        if not self._id:
            return None
        asked = stage_pb2.Generate()
        asked.CopyFrom(request)
        asked.response_id = self._id
        asked.epoch = self._links.epoch
        if asked != self._request or speak != self._speak:
            self.drop("mismatch")
            return None
        if self._links.rebinds != self._rebinds:
            self.drop("worker_changed")
            return None
        if any(isinstance(m, stage_pb2.StageError) for m in self._held):
            self.drop("failed")
            return None
        taken = (self._id, self._held)
        self._id, self._held = "", []
        self._count("used")
        return taken

    def refuse(self) -> None:
        """A pause whose answer is not wanted now (a reply or a turn is under way,
        or the session does not answer by itself); one held before it goes too."""
        self.drop("replaced")
        self._count("not_wanted")

    def drop(self, reason: str) -> None:
        """Both stages stop it; nothing of it is ever sent."""
        if not self._id:
            return
        self._links.cancel_response(self._id)
        self._id, self._held = "", []
        self._count(reason)
