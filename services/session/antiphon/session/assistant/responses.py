"""One assistant response: its state and the events of its lifecycle.

The normative order (reference "Normative Realtime event contract"):
`response.created -> conversation.item.added/created -> output_item.added ->
content_part.added -> response.speak -> (audio delta + transcript delta)* ->
output_audio.done -> output_audio_transcript.done -> content_part.done ->
output_item.done -> conversation.item.done -> response.done ->
rate_limits.updated`. This module builds those events; the actor decides
when each happens.

A response that may call a function opens its message item only once there
is something to say: an answer that is only a call has no message at all.
The calls are output items after the message (OpenAI's `function_call`
items), their events sent with the message's closing ones, before
`response.done`: a call is said as nothing, and a client runs it when the
response is over.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from google.protobuf.message import Message

from antiphon.common import audio_formats
from antiphon.common.ids import new_id
from antiphon.session.actor.event_kinds import EventKind
from antiphon.session.assistant.playback import Ledger
from antiphon.session.config import tools
from antiphon.session.conversation import items
from antiphon.v1 import common_pb2 as cpb
from antiphon.v1 import session_pb2 as spb
from antiphon.v1 import stage_pb2

# (oneof field name, message): what the actor journals and sends.
Event = tuple[EventKind, Message]


@dataclass
class ResponseOptions:
    """Response-scoped options; they never outlive their response."""

    instructions: str
    output_modalities: list[str]
    temperature: float
    max_output_tokens: int
    metadata: dict[str, str] = field(default_factory=dict)
    tools: list[cpb.Tool] = field(default_factory=list)
    tool_choice: cpb.ToolChoice = field(default_factory=lambda: cpb.ToolChoice(mode="auto"))

    @property
    def may_call(self) -> bool:
        return tools.may_call(self.tools, self.tool_choice)

    @property
    def audio(self) -> bool:
        """Its answer is spoken."""
        return "audio" in self.output_modalities

    def request(
        self, history: list[cpb.Item], retention_ratio: float, user: str = ""
    ) -> stage_pb2.Generate:
        """What stage0 is asked for an answer: the instructions, the committed
        `history`, then `user`'s words when a turn not yet committed is answered."""
        messages = [cpb.ChatMessage(role="system", content=self.instructions)]
        for item in history:
            messages.extend(items.prompt_messages(item))
        if user:
            messages.append(cpb.ChatMessage(role="user", content=user))
        return stage_pb2.Generate(
            messages=messages,
            temperature=self.temperature,
            max_output_tokens=self.max_output_tokens,
            retention_ratio=retention_ratio,
            tools=self.tools,
            tool_choice=self.tool_choice,
        )


@dataclass(frozen=True)
class ActiveResponse:
    """What the other parts may know of the response in flight: a copy of
    its names, never the state itself (ResponseControl is its one writer)."""

    id: str
    item_id: str


@dataclass
class ResponseState:
    id: str
    item_id: str
    session_id: str
    epoch: int
    turn_id: int
    previous_item_id: str
    options: ResponseOptions
    # The id the stages know its answer by: its own, or a preemptive answer's
    # it took over (preemption.py).
    stage_id: str = ""
    created: bool = False
    # Its message item was announced (at once, unless it may answer with a call).
    opened: bool = False
    generation_requested: bool = False
    generation_done: bool = False
    # A model-native backend's model talked in it, then went quiet (it ends
    # once that speech is decoded).
    model_spoke: bool = False
    model_quiet: bool = False
    text: str = ""
    metrics: cpb.StageMetrics = field(default_factory=cpb.StageMetrics)
    # The functions it called (`function_call` items), in order.
    calls: list[cpb.Item] = field(default_factory=list)
    # A delegate LLM's answer (delegate.py), not the session's own model's.
    delegated: bool = False
    # The audio sent so far, its transcript and word marks (what truncation cuts by).
    ledger: Ledger = field(init=False)

    def __post_init__(self) -> None:
        self.stage_id = self.stage_id or self.id
        self.ledger = Ledger(
            response_id=self.id, item_id=self.item_id, previous_item_id=self.previous_item_id
        )

    @property
    def transcript(self) -> str:
        return self.ledger.transcript

    @property
    def audio_ms(self) -> int:
        return self.ledger.generated_ms

    @property
    def audio(self) -> bool:
        return self.options.audio

    @property
    def ref(self) -> spb.PartRef:
        return spb.PartRef(response_id=self.id, item_id=self.item_id)

    def item(self, status: str) -> cpb.Item:
        content = []
        if status != "in_progress":
            if self.audio:
                content.append(cpb.ContentPart(type="output_audio", transcript=self.transcript))
            else:
                content.append(cpb.ContentPart(type="output_text", text=self.text))
        return cpb.Item(
            id=self.item_id, type="message", role="assistant", status=status, content=content
        )

    def output(self, status: str) -> list[cpb.Item]:
        """What `response.done` holds: the message (if it was opened), then the calls."""
        message = [self.item(item_status(status))] if self.opened else []
        return message + self.calls

    def add_call(self, call: cpb.ToolCall) -> cpb.Item:
        """A function the model called: a completed `function_call` item, with its ids."""
        item = cpb.Item(
            id=new_id("item"),
            type="function_call",
            status="completed",
            call_id=call.call_id or new_id("call"),
            name=call.name,
            arguments=call.arguments or "{}",
        )
        self.calls.append(item)
        return item

    def response(self, status: str, reason: str = "", with_output: bool = False) -> spb.Response:
        return spb.Response(
            id=self.id,
            status=status,
            status_reason=reason,
            output=self.output(status) if with_output else [],
            output_modalities=self.options.output_modalities,
            epoch=self.epoch,
            turn_id=self.turn_id,
            metadata=self.options.metadata,
            session_id=self.session_id,
            playback=self.ledger.playback(),
            delegated=self.delegated,
        )

    # ------------------------------------------------------------ events
    def created_events(self) -> list[Event]:
        """Everything up to the first delta (the message's opening only if it
        cannot be a call: else `message_events`, at the first text)."""
        self.created = True
        events: list[Event] = [
            ("response_created", spb.ResponseEvent(response=self.response("in_progress"))),
        ]
        if not self.options.may_call:
            events += self.message_events()
        return events

    def message_events(self) -> list[Event]:
        """The message item's opening: its item, its content part, and the speak mark."""
        self.opened = True
        item = self.item("in_progress")
        part = cpb.ContentPart(type="audio" if self.audio else "text")
        events: list[Event] = [
            ("item_added", spb.ItemEvent(previous_item_id=self.previous_item_id, item=item)),
            ("item_created", spb.ItemEvent(previous_item_id=self.previous_item_id, item=item)),
            ("output_item_added", spb.OutputItemEvent(response_id=self.id, item=item)),
            ("content_part_added", spb.ContentPartEvent(ref=self.ref, part=part)),
        ]
        if self.audio:
            events.append(
                (
                    "response_speak",
                    spb.Speak(ref=self.ref, session_id=self.session_id, epoch=self.epoch),
                )
            )
        return events

    def audio_events(
        self,
        pcm16: bytes,
        rate: int,
        text: str,
        duration_ms: int,
        marks: list[cpb.AudioTextMark],
        output_format: cpb.AudioFormat,
    ) -> list[Event]:
        """One audio delta and the transcript delta paired with it.

        The delta is encoded here, in the session's output format, and names
        the encoding and rate it is in: the session owns that format, and
        journals the bytes the client hears (the gateway only base64s them).
        """
        exact_ms = 1000 * len(pcm16) / 2 / rate if pcm16 and rate else duration_ms
        self.ledger.add_chunk(text, exact_ms, marks)
        encoded = audio_formats.encode(pcm16, rate, output_format.encoding)
        delta = spb.AudioDelta(
            ref=self.ref,
            audio=encoded.audio,
            session_id=self.session_id,
            epoch=self.epoch,
            audio_duration_ms=self.audio_ms,
            marks=marks,
            playback=self.ledger.playback(),
            format=cpb.AudioFormat(
                encoding=output_format.encoding or audio_formats.PCM16,
                sample_rate_hz=encoded.sample_rate_hz,
            ),
        )
        if not text:
            # A model-native model's frame of no word (most of its frames): no
            # transcript delta to pair, as OpenAI sends none.
            return [("audio_delta", delta)]
        return [
            ("audio_delta", delta),
            ("audio_transcript_delta", spb.TextDelta(ref=self.ref, delta=text)),
        ]

    def text_events(self, text: str) -> list[Event]:
        self.text += text
        return [("text_delta", spb.TextDelta(ref=self.ref, delta=text))]

    def settle(self, status: str) -> None:
        """The response ends with `status`. Only a completed response calls
        anything: a call the user talked over was never made."""
        if status != "completed":
            self.calls.clear()

    def terminal_events(
        self, status: str, reason: str = "", *, with_metrics: bool = False
    ) -> list[Event]:
        """The message's `.done` cascade (if it was opened), the calls' events,
        `response.done` and `rate_limits.updated`. Call `settle` first."""
        events = self._message_done(status) if self.opened else []
        previous = self.item_id if self.opened else self.previous_item_id
        for index, call in enumerate(self.calls, start=int(self.opened)):
            events += call_events(self.id, index, previous, call)
            previous = call.id
        done = self.response(status, reason, with_output=True)
        done.committed = status == "completed"
        if with_metrics:
            done.stage_metrics.CopyFrom(self.metrics)
            done.has_stage_metrics = True
        events += [
            ("response_done", spb.ResponseEvent(response=done)),
            ("rate_limits_updated", spb.RateLimitsUpdated()),
        ]
        return events

    def _message_done(self, status: str) -> list[Event]:
        events: list[Event] = []
        if self.audio:
            if self.audio_ms or self.transcript:
                events.append(("audio_done", spb.PartDone(ref=self.ref)))
            if self.transcript:
                events.append(
                    ("audio_transcript_done", spb.TextDone(ref=self.ref, text=self.transcript))
                )
            part = cpb.ContentPart(type="audio", transcript=self.transcript)
        else:
            events.append(("text_done", spb.TextDone(ref=self.ref, text=self.text)))
            part = cpb.ContentPart(type="text", text=self.text)
        item = self.item(item_status(status))
        return [
            *events,
            ("content_part_done", spb.ContentPartEvent(ref=self.ref, part=part)),
            ("output_item_done", spb.OutputItemEvent(response_id=self.id, item=item)),
            ("item_done", spb.ItemEvent(previous_item_id=self.previous_item_id, item=item)),
        ]


def call_events(response_id: str, index: int, previous: str, call: cpb.Item) -> list[Event]:
    """One `function_call` output item, from its announcement (in progress,
    no arguments yet) to its done: its arguments come whole, as one delta."""
    started = cpb.Item()
    started.CopyFrom(call)
    started.status = "in_progress"
    started.arguments = ""
    ref = spb.PartRef(response_id=response_id, item_id=call.id, output_index=index)
    arguments = spb.FunctionCallArguments(ref=ref, call_id=call.call_id, arguments=call.arguments)
    done = spb.FunctionCallArguments()
    done.CopyFrom(arguments)
    done.name = call.name
    return [
        ("item_added", spb.ItemEvent(previous_item_id=previous, item=started)),
        ("item_created", spb.ItemEvent(previous_item_id=previous, item=started)),
        (
            "output_item_added",
            spb.OutputItemEvent(response_id=response_id, output_index=index, item=started),
        ),
        ("function_call_arguments_delta", arguments),
        ("function_call_arguments_done", done),
        (
            "output_item_done",
            spb.OutputItemEvent(response_id=response_id, output_index=index, item=call),
        ),
        ("item_done", spb.ItemEvent(previous_item_id=previous, item=call)),
    ]


def item_status(response_status: str) -> str:
    return {"completed": "completed", "cancelled": "incomplete", "failed": "incomplete"}.get(
        response_status, "in_progress"
    )
