"""The playback ledger of one response: what was generated, sent, played, committed.

Stage1 sends each audio chunk with the text it speaks and where each word of
that text ends in the chunk's audio. The ledger keeps those marks on the
response's own clock, so a playback position maps back to the words the
listener actually heard: a truncation keeps every word whose audio ends at
or before it, not a share of the text proportional to time.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from antiphon.v1 import common_pb2 as cpb


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
    played_ms: int = 0
    committed_ms: int = 0
    # Whether the response's item is in the conversation history.
    in_history: bool = False

    def add_chunk(self, text: str, duration_ms: int, marks: list[cpb.AudioTextMark]) -> None:
        """One chunk sent to the client (journaled before it is sent)."""
        chars, start_ms = len(self.transcript), self.generated_ms
        self.transcript += text
        if marks:
            self.marks += [(chars + m.text_chars, start_ms + m.audio_end_ms) for m in marks]
        elif text.strip():
            # A voice without word timings: the chunk's words end with its audio.
            self.marks.append((chars + len(text), start_ms + duration_ms))
        self.generated_ms += duration_ms
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


class Ledgers:
    """The ledgers of a session's recent responses, for acks that arrive after `response.done`."""

    def __init__(self, keep: int = 16) -> None:
        self._keep = keep
        self._by_response: dict[str, Ledger] = {}

    def add(self, ledger: Ledger) -> None:
        self._by_response[ledger.response_id] = ledger
        while len(self._by_response) > self._keep:
            del self._by_response[next(iter(self._by_response))]

    def find(self, *, response_id: str = "", item_id: str = "") -> Ledger | None:
        if response_id:
            return self._by_response.get(response_id)
        for ledger in self._by_response.values():
            if ledger.item_id == item_id:
                return ledger
        return None
