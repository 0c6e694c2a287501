"""The user's side of the conversation: turns being sealed and heard.

A commit (the client's, or server VAD's at the end of speech) seals the
input into a user item at once; its transcript comes later from stage0, so
the item waits here as pending until it is heard. Everything is plain state
and returns the events to emit; the actor stores items and sends events.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from antiphon.common.ids import new_id
from antiphon.session import items
from antiphon.session.responses import Event
from antiphon.v1 import common_pb2 as cpb
from antiphon.v1 import session_pb2 as spb
from antiphon.v1 import stage_pb2


@dataclass
class PendingItem:
    """A committed user item whose transcript stage0 has not returned yet."""

    previous_item_id: str
    # `input.text.append` text that joins this turn.
    extra_text: str = ""
    # Created with `conversation.item.create` (audio to transcribe): where it goes.
    created: cpb.Item | None = None
    insert_after: str | None = None


@dataclass
class Heard:
    """A pending item, heard: store `item` (after `insert_after` when it was
    created into a place), then emit `events`."""

    item: cpb.Item
    events: list[Event]
    created: bool
    insert_after: str | None = None


@dataclass
class Turns:
    session_id: str
    last_item_id: str = ""
    turn_id: int = 0
    pending: dict[str, PendingItem] = field(default_factory=dict)
    # `input.text.append` text waiting for the turn's commit.
    text: list[str] = field(default_factory=list)
    # Server VAD: the item id `speech_started` announced, for its turn.
    speech_item_id: str = ""
    speech_start_ms: int = 0

    # ----------------------------------------------------------- sealing
    def seal_text(self, epoch: int, *, deferred: bool) -> tuple[cpb.Item, list[Event]]:
        """A turn of `input.text.append` text only: complete at once."""
        item = items.user_text_item(new_id("item"), " ".join(self.text))
        self.text.clear()
        previous, events = self._new_turn(item, epoch, deferred=deferred)
        events.append(("item_done", spb.ItemEvent(previous_item_id=previous, item=item)))
        return item, events

    def seal_audio(self, item_id: str, epoch: int, *, deferred: bool) -> list[Event]:
        """The buffered audio becomes a user item whose transcript is pending."""
        item = items.user_audio_item(item_id or new_id("item"), "")
        previous = self.last_item_id
        self.pending[item.id] = PendingItem(
            previous_item_id=previous, extra_text=" ".join(self.text)
        )
        self.text.clear()
        return self._new_turn(item, epoch, deferred=deferred)[1]

    def seal_utterance(
        self, transcript: str, epoch: int, *, deferred: bool
    ) -> tuple[cpb.Item, list[Event]]:
        """Native lane: the model heard a whole utterance, transcript and all."""
        item = items.user_audio_item(new_id("item"), "")
        previous, events = self._new_turn(item, epoch, deferred=deferred)
        heard = self._heard(item.id, PendingItem(previous_item_id=previous), transcript)
        return heard.item, events + heard.events

    def expect_created(self, item: cpb.Item, after: str | None) -> None:
        """A `conversation.item.create` audio item stage0 is to hear: stored
        where asked once heard."""
        self.pending[item.id] = PendingItem(
            previous_item_id=after if after is not None else self.last_item_id,
            created=item,
            insert_after=after,
        )
        if after is None:
            self.last_item_id = item.id

    def heard(self, item_id: str, transcript: str) -> Heard | None:
        """Stage0's transcript of a pending item (None: not ours, or dropped)."""
        pending = self.pending.pop(item_id, None)
        return None if pending is None else self._heard(item_id, pending, transcript)

    def committed_without_item(self, epoch: int, item_id: str = "") -> spb.InputCommitted:
        """The acknowledgement of a commit that made no turn (silence, a short
        remark). It still names an item, as every commit does (OpenAI's
        `committed.item_id` is never null): the one the VAD announced, or a
        fresh id that no item will take."""
        return spb.InputCommitted(
            previous_item_id=self.last_item_id,
            item_id=item_id or new_id("item"),
            turn_id=self.turn_id,
            epoch=epoch,
            session_id=self.session_id,
        )

    # ------------------------------------------------------- server VAD
    def speech_started(self, audio_start_ms: int) -> Event:
        self.speech_item_id = new_id("item")
        self.speech_start_ms = audio_start_ms
        return (
            "speech_started",
            spb.SpeechStarted(audio_start_ms=audio_start_ms, item_id=self.speech_item_id),
        )

    def speech_stopped(
        self, msg: stage_pb2.VadSpeechStopped, turn_detection: cpb.TurnDetection
    ) -> tuple[str, int, Event]:
        """The item id the turn takes, how long the user spoke, and the event."""
        item_id = self.speech_item_id or new_id("item")
        self.speech_item_id = ""
        if msg.HasField("speech_ms"):
            speech_ms = msg.speech_ms
        else:
            # The VAD's span holds the prefix padding and the closing silence too.
            speech_ms = (
                msg.audio_end_ms
                - self.speech_start_ms
                - turn_detection.prefix_padding_ms
                - turn_detection.silence_duration_ms
            )
        event = (
            "speech_stopped",
            spb.SpeechStopped(audio_end_ms=msg.audio_end_ms, item_id=item_id),
        )
        return item_id, speech_ms, event

    def forget_speech(self) -> None:
        self.speech_item_id = ""

    # ------------------------------------------------------------ inside
    def _new_turn(self, item: cpb.Item, epoch: int, *, deferred: bool) -> tuple[str, list[Event]]:
        previous = self.last_item_id
        self.turn_id += 1
        self.last_item_id = item.id
        committed = spb.InputCommitted(
            previous_item_id=previous,
            item_id=item.id,
            turn_id=self.turn_id,
            epoch=epoch,
            history_len=len(self.pending),
            session_id=self.session_id,
            response_create_deferred=deferred,
        )
        return previous, [
            *item_events(previous, item, "item_added", "item_created"),
            ("input_committed", committed),
        ]

    def _heard(self, item_id: str, pending: PendingItem, transcript: str) -> Heard:
        previous = pending.previous_item_id
        if pending.created is not None:
            item = items.with_transcript(pending.created, transcript)
            return Heard(
                item,
                item_events(previous, item, "item_added", "item_created", "item_done"),
                created=True,
                insert_after=pending.insert_after,
            )
        item = items.user_audio_item(item_id, transcript, pending.extra_text)
        completed = spb.TranscriptionCompleted(item_id=item_id, transcript=transcript)
        return Heard(
            item,
            [
                ("transcription_completed", completed),
                ("item_done", spb.ItemEvent(previous_item_id=previous, item=item)),
            ],
            created=False,
        )


def item_events(previous: str, item: cpb.Item, *kinds: str) -> list[Event]:
    """One item's event under each of `kinds` (`item_added`, `item_created`, `item_done`)."""
    return [(kind, spb.ItemEvent(previous_item_id=previous, item=item)) for kind in kinds]
