"""The user's side of the conversation: turns being sealed and heard.

A commit (the client's, or server VAD's at the end of speech) seals the
input into a user item at once; its transcript comes later from stage0, so
the item waits here as pending until it is heard. Everything is plain state
and returns the events to emit; listening and edits store the items and
send the events. Other parts never write these facts: they tell `Turns`
what happened (`item_added`, `response_ended`, `transcripts_lost`, ...).
"""

from __future__ import annotations

from dataclasses import dataclass

from antiphon.common.ids import new_id
from antiphon.session.actor.event_kinds import EventKind
from antiphon.session.assistant.responses import Event
from antiphon.session.conversation import items
from antiphon.v1 import common_pb2 as cpb
from antiphon.v1 import session_pb2 as spb
from antiphon.v1 import stage_pb2

# Native lane: utterances whose transcript may still come (more mean some
# were dropped by a cancel: their ids are for nobody).
MAX_UTTERANCES = 8


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


class Turns:
    """The user's turns: the only writer of which item is the newest, the
    turn number, the items waiting for their transcript and the text
    waiting for a commit. Other parts tell it what happened."""

    def __init__(self, session_id: str, *, last_item_id: str = "", turn_id: int = 0) -> None:
        self.session_id = session_id
        self._last_item_id = last_item_id
        self._turn_id = turn_id
        self._pending: dict[str, PendingItem] = {}
        # `input.text.append` text waiting for the turn's commit.
        self._text: list[str] = []
        # Server VAD: the item id `speech_started` announced, for its turn
        # (native lane: the id its utterance's item will take).
        self._speech_item_id = ""
        self._speech_start_ms = 0
        # Transcript text already sent as deltas, by item id: the speech being
        # heard's, then its pending item's.
        self._streamed: dict[str, str] = {}
        # Native lane: utterances ended, waiting for their transcript: item id
        # by the audio time they ended at.
        self._utterance_ids: dict[int, str] = {}

    # ------------------------------------------------------------- facts
    @property
    def last_item_id(self) -> str:
        """The newest item of the conversation: the one the next item follows."""
        return self._last_item_id

    @property
    def turn_id(self) -> int:
        return self._turn_id

    @property
    def pending(self) -> int:
        """Sealed items whose transcript stage0 still owes."""
        return len(self._pending)

    @property
    def has_text(self) -> bool:
        return bool(self._text)

    # ------------------------------------------------------ what happened
    def text_appended(self, text: str) -> None:
        """`input.text.append`: joins the next commit's turn."""
        self._text.append(text)

    def input_cleared(self) -> None:
        """The uncommitted input went (cleared, cancelled, or only a remark)."""
        self._text.clear()

    def item_added(self, item_id: str) -> None:
        """An item went to the end of the conversation: the next one follows it."""
        self._last_item_id = item_id

    def newest_deleted(self, newest_now: str) -> None:
        """The newest item was deleted: `newest_now` is the conversation's last."""
        self._last_item_id = newest_now

    def response_ended(self, item_id: str, last_id: str) -> None:
        """The response whose item is `item_id` ended with `last_id` as its
        last item (its last call, or the turn it answered when it said
        nothing): the newest, unless an item came after it meanwhile."""
        if self._last_item_id == item_id:
            self._last_item_id = last_id

    def transcripts_lost(self) -> None:
        """Stage0's worker died: the transcripts it owed will not come."""
        self._pending.clear()
        self._streamed.clear()

    # ----------------------------------------------------------- sealing
    def seal_text(self, epoch: int, *, deferred: bool) -> tuple[cpb.Item, list[Event]]:
        """A turn of `input.text.append` text only: complete at once."""
        item = items.user_text_item(new_id("item"), " ".join(self._text))
        self._text.clear()
        previous, events = self._new_turn(item, epoch, deferred=deferred)
        events.append(("item_done", spb.ItemEvent(previous_item_id=previous, item=item)))
        return item, events

    def seal_audio(self, item_id: str, epoch: int, *, deferred: bool) -> list[Event]:
        """The buffered audio becomes a user item whose transcript is pending."""
        item = items.user_audio_item(item_id or new_id("item"), "")
        previous = self._last_item_id
        self._pending[item.id] = PendingItem(
            previous_item_id=previous, extra_text=" ".join(self._text)
        )
        self._text.clear()
        return self._new_turn(item, epoch, deferred=deferred)[1]

    def seal_utterance(
        self, item_id: str, transcript: str, epoch: int, *, deferred: bool
    ) -> tuple[cpb.Item, list[Event]]:
        """Native lane: the model heard a whole utterance, transcript and all
        (its item id: `utterance_item_id`'s)."""
        item = items.user_audio_item(item_id, "")
        previous, events = self._new_turn(item, epoch, deferred=deferred)
        heard = self._heard(item.id, PendingItem(previous_item_id=previous), transcript)
        return heard.item, events + heard.events

    def expect_created(self, item: cpb.Item, after: str | None) -> None:
        """A `conversation.item.create` audio item stage0 is to hear: stored
        where asked once heard."""
        self._pending[item.id] = PendingItem(
            previous_item_id=after if after is not None else self._last_item_id,
            created=item,
            insert_after=after,
        )
        if after is None:
            self._last_item_id = item.id

    def heard(self, item_id: str, transcript: str) -> Heard | None:
        """Stage0's transcript of a pending item (None: not ours, or dropped)."""
        pending = self._pending.pop(item_id, None)
        return None if pending is None else self._heard(item_id, pending, transcript)

    def committed_without_item(self, epoch: int, item_id: str = "") -> spb.InputCommitted:
        """The acknowledgement of a commit that made no turn (silence, a short
        remark). It still names an item, as every commit does (OpenAI's
        `committed.item_id` is never null): the one the VAD announced, or a
        fresh id that no item will take."""
        return spb.InputCommitted(
            previous_item_id=self._last_item_id,
            item_id=item_id or new_id("item"),
            turn_id=self._turn_id,
            epoch=epoch,
            session_id=self.session_id,
        )

    # ------------------------------------------------------- server VAD
    def speech_started(self, audio_start_ms: int) -> Event:
        self._speech_item_id = new_id("item")
        self._speech_start_ms = audio_start_ms
        # Streams of speech that made no item (a remark, a cleared input) end.
        waiting = set(self._pending) | set(self._utterance_ids.values())
        self._streamed = {k: v for k, v in self._streamed.items() if k in waiting}
        return (
            "speech_started",
            spb.SpeechStarted(audio_start_ms=audio_start_ms, item_id=self._speech_item_id),
        )

    def speech_stopped(
        self, msg: stage_pb2.VadSpeechStopped, turn_detection: cpb.TurnDetection
    ) -> tuple[str, int, Event]:
        """The item id the turn takes, how long the user spoke, and the event."""
        item_id = self._speech_item_id or new_id("item")
        self._speech_item_id = ""
        if msg.HasField("speech_ms"):
            speech_ms = msg.speech_ms
        else:
            # The VAD's span holds the prefix padding and the closing silence too.
            speech_ms = (
                msg.audio_end_ms
                - self._speech_start_ms
                - turn_detection.prefix_padding_ms
                - turn_detection.silence_duration_ms
            )
        event: Event = (
            "speech_stopped",
            spb.SpeechStopped(audio_end_ms=msg.audio_end_ms, item_id=item_id),
        )
        return item_id, speech_ms, event

    def utterance_ended(self, audio_end_ms: int) -> None:
        """Native lane: the speech being heard ended at `audio_end_ms`. Its
        utterance, transcribed later (maybe after the next one started), takes
        the item id its partial transcripts went out under."""
        if self._speech_item_id:
            self._utterance_ids[audio_end_ms] = self._speech_item_id
            self._speech_item_id = ""
        while len(self._utterance_ids) > MAX_UTTERANCES:
            self._utterance_ids.pop(next(iter(self._utterance_ids)))

    def utterance_item_id(self, audio_end_ms: int) -> str:
        """Native lane: the item id of the utterance that ended at `audio_end_ms`."""
        return self._utterance_ids.pop(audio_end_ms, "") or new_id("item")

    def forget_speech(self) -> None:
        self._speech_item_id = ""

    def partial(self, text: str) -> Event | None:
        """Stage0's agreed words of the speech being heard: what they add to
        what was sent, as a transcription delta of its item (None: nothing new,
        or no speech is being heard)."""
        item_id = self._speech_item_id
        sent = self._streamed.get(item_id, "")
        if not item_id or len(text) <= len(sent) or not text.startswith(sent):
            return None
        self._streamed[item_id] = text
        return "transcription_delta", spb.TranscriptionDelta(
            item_id=item_id, delta=text[len(sent) :]
        )

    # ------------------------------------------------------------ inside
    def _new_turn(self, item: cpb.Item, epoch: int, *, deferred: bool) -> tuple[str, list[Event]]:
        previous = self._last_item_id
        self._turn_id += 1
        self._last_item_id = item.id
        committed = spb.InputCommitted(
            previous_item_id=previous,
            item_id=item.id,
            turn_id=self._turn_id,
            epoch=epoch,
            history_len=len(self._pending),
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
        events: list[Event] = []
        # The rest of the transcript after the deltas sent while the user spoke
        # (all of it if none were). A final pass that revised a streamed word
        # adds nothing: a delta is never taken back, and `completed` is whole.
        sent = self._streamed.pop(item_id, "")
        if len(transcript) > len(sent) and transcript.startswith(sent):
            rest = spb.TranscriptionDelta(item_id=item_id, delta=transcript[len(sent) :])
            events.append(("transcription_delta", rest))
        completed = spb.TranscriptionCompleted(item_id=item_id, transcript=transcript)
        events += [
            ("transcription_completed", completed),
            ("item_done", spb.ItemEvent(previous_item_id=previous, item=item)),
        ]
        return Heard(item, events, created=False)


def item_events(previous: str, item: cpb.Item, *kinds: EventKind) -> list[Event]:
    """One item's event under each of `kinds` (`item_added`, `item_created`, `item_done`)."""
    return [(kind, spb.ItemEvent(previous_item_id=previous, item=item)) for kind in kinds]
