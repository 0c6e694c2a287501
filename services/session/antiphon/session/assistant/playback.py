"""The playback ledger of one response: what was generated, sent, played, committed.

Stage1 sends each audio chunk with the text it speaks and where each word of
that text ends in the chunk's audio. The ledger keeps those marks on the
response's own clock, so a playback position maps back to the words the
listener actually heard: a truncation keeps every word whose audio ends at
or before it, not a share of the text proportional to time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from antiphon.session.actor.errors import invalid
from antiphon.session.conversation import items
from antiphon.session.conversation.conversation import Conversation
from antiphon.v1 import common_pb2 as cpb
from antiphon.v1 import session_pb2 as spb


@dataclass
class Ledger:
    response_id: str
    item_id: str
    # The item this response answers: where its own item goes in history.
    previous_item_id: str = ""
    # The spoken text so far, and (end char, end ms) for each word in it.
    transcript: str = ""
    marks: list[tuple[int, int]] = field(default_factory=list)
    generated_ms: int = 0
    sent_ms: int = 0
    # The audio's exact length: chunks' whole milliseconds would drift from
    # what a client counts in samples, a rounding a chunk.
    audio_ms: float = 0.0
    played_ms: int = 0
    committed_ms: int = 0
    # Whether the response's item is in the conversation history.
    in_history: bool = False

    def add_chunk(self, text: str, duration_ms: float, marks: list[cpb.AudioTextMark]) -> None:
        """One chunk of `duration_ms` (its samples', exactly) sent to the
        client (journaled before it is sent)."""
        chars, start_ms = len(self.transcript), self.audio_ms
        self.transcript += text
        if marks:
            self.marks += [(chars + m.text_chars, round(start_ms + m.audio_end_ms)) for m in marks]
        elif text.strip():
            # A voice without word timings: the chunk's words end with its audio.
            self.marks.append((chars + len(text), round(start_ms + duration_ms)))
        self.audio_ms += duration_ms
        # Whole milliseconds, up: a client that counts the samples it got and
        # rounds may truncate at the last partial millisecond.
        self.generated_ms = math.ceil(round(self.audio_ms, 6))
        self.sent_ms = self.generated_ms

    def stored(self) -> None:
        """The response's item was put into the conversation history."""
        self.in_history = True

    def heard(self, audio_end_ms: int) -> str:
        """The transcript up to the last word whose audio ends at or before `audio_end_ms`."""
        cut = 0
        for chars, end_ms in self.marks:
            if end_ms > audio_end_ms:
                break
            cut = chars
        return self.transcript[:cut].rstrip()

    def acknowledge(self, played_ms: int, committed_ms: int) -> None:
        # Positions only move forward: a late, reordered ack changes nothing.
        self.played_ms = max(self.played_ms, min(played_ms, self.sent_ms))
        self.committed_ms = max(self.committed_ms, min(committed_ms, self.played_ms))

    def playback(self) -> cpb.Playback:
        return cpb.Playback(
            generated_ms=self.generated_ms,
            sent_ms=self.sent_ms,
            played_ms=self.played_ms,
            committed_ms=self.committed_ms,
        )


class Playback:
    """What the client played of a session's recent answers, and what history
    keeps of each: the one writer of an answer's ledger once it ended
    (ResponseControl hands it over; until then it is the response's own).
    Acks and truncations may come after `response.done`."""

    def __init__(self, conversation: Conversation, keep: int = 16) -> None:
        self._conversation = conversation
        self._keep = keep
        self._by_response: dict[str, Ledger] = {}

    def ended(self, ledger: Ledger) -> None:
        self._by_response[ledger.response_id] = ledger
        while len(self._by_response) > self._keep:
            del self._by_response[next(iter(self._by_response))]

    def _find(self, *, response_id: str = "", item_id: str = "") -> Ledger | None:
        if response_id:
            return self._by_response.get(response_id)
        for ledger in self._by_response.values():
            if ledger.item_id == item_id:
                return ledger
        return None

    async def truncate(self, item_id: str, audio_end_ms: int) -> str:
        """History keeps the words of an ended answer heard by `audio_end_ms` (returned)."""
        ledger = self._find(item_id=item_id)
        if ledger is None:
            await self._conversation.get(item_id)  # an unknown id is item_not_found
            raise invalid(
                "invalid_value",
                "only an assistant audio item of this session can be truncated",
                "item_id",
            )
        if audio_end_ms > ledger.sent_ms:
            raise invalid(
                "invalid_value",
                f"audio_end_ms {audio_end_ms} is past the item's audio ({ledger.sent_ms} ms)",
                "audio_end_ms",
            )
        return await self.store_heard(ledger, audio_end_ms)

    async def acknowledge(
        self, ack: spb.PlaybackAck, active: Ledger | None, *, ack_only: bool
    ) -> Ledger:
        """The ledger `ack` acknowledges (an ended answer's, or `active`, the
        answer still being said), moved on; once its answer ended, what was
        heard becomes the history (`ack_only`), or cuts it (a truncating ack)."""
        ledger = self._find(response_id=ack.response_id, item_id=ack.item_id) or active
        if ledger is None:
            raise invalid(
                "response_not_found",
                f"no response {ack.response_id or ack.item_id} of this session to acknowledge",
                "response_id",
            )
        committed = ack.committed_ms if ack.HasField("committed_ms") else ack.played_ms
        ledger.acknowledge(ack.played_ms, committed)
        if ledger is not active and (ack.truncate or ack_only):
            await self.store_heard(ledger, ledger.committed_ms)
        return ledger

    async def store_heard(self, ledger: Ledger, audio_end_ms: int) -> str:
        """Keep in history the words whose audio ends by `audio_end_ms`: the next prompt."""
        heard = ledger.heard(audio_end_ms)
        item = items.heard_item(ledger.item_id, heard)
        if ledger.in_history:
            await self._conversation.replace(item)
        else:
            # Right after the turn it answers, even if later turns came first.
            await self._conversation.place(item, ledger.previous_item_id)
            ledger.stored()
        return heard
