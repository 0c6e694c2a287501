"""The official `openai` SDK's own pydantic models accept every raw frame we emit.

A stock client parses events with `construct` (no validation), so a frame it
cannot validate still "works" until a field is read. Here every raw JSON
frame of a session on the synthetic stack (turns, cancels, errors, items,
playback, input control) is validated against the SDK model of its type.
Frames whose type the SDK does not know must be the reference's duplex-only
(tier 3) extensions.

Where the reference and OpenAI's schema disagree, the reference wins
(DESIGN.md); each such conflict is listed in `REFERENCE_WINS` with why, and
no other validation error is tolerated.
"""

from __future__ import annotations

import itertools
import typing
from dataclasses import dataclass
from typing import Any

from openai.types.realtime import RealtimeServerEvent
from pydantic import BaseModel, TypeAdapter, ValidationError

from tests.support import reference
from tests.support.realtime import MANUAL, Event, RealtimeClient, of_type
from tests.support.speech import spoken

# An event the bound backend may lack: refused with one of these, it is skipped.
SKIPPABLE = {"unsupported_event", "unsupported_capability"}


def _sdk_models() -> dict[str, type[BaseModel]]:
    """Wire type -> the SDK model of that type, from the server event union."""
    union = typing.get_args(typing.get_args(RealtimeServerEvent)[0])
    models: dict[str, type[BaseModel]] = {}
    for model in union:
        (literal,) = typing.get_args(model.model_fields["type"].annotation)
        models[literal] = model
    return models


SDK_MODELS = _sdk_models()


@dataclass(frozen=True)
class Conflict:
    types: frozenset[str]
    loc: tuple[str, ...]
    error: str
    why: str

    def covers(self, frame_type: str, err: Any) -> bool:
        loc = tuple(str(part) for part in err["loc"])
        return (
            frame_type in self.types
            and loc[: len(self.loc)] == self.loc
            and err["type"] == self.error
        )


REFERENCE_WINS = (
    Conflict(
        frozenset({"response.created", "response.done"}),
        ("response", "metadata"),
        "string_type",
        # Tier 2: "the raw duplex event under `response.metadata` (`duplex_event`)", and
        # response.done's metadata holds `committed` and the `playback` ledger (and stage
        # metrics when asked); OpenAI types metadata as string -> string.
        "duplex metadata is nested JSON",
    ),
    Conflict(
        frozenset({"response.done"}),
        ("response", "status_details", "reason"),
        "literal_error",
        # Tier 2: "`status_details.reason` uses vLLM reasons (`barge_in`, `client_cancelled`,
        # `new_response`, ...)"; OpenAI allows four reasons only.
        "duplex cancellation reasons",
    ),
)


def sdk_violations(frame: Event) -> tuple[list[Any], set[Conflict]]:
    """Validation errors no conflict covers, and the conflicts that covered some."""
    try:
        TypeAdapter(SDK_MODELS[frame["type"]]).validate_python(frame)
    except ValidationError as exc:
        errors = exc.errors()
    else:
        return [], set()
    used = {c for c in REFERENCE_WINS for err in errors if c.covers(frame["type"], err)}
    left = [err for err in errors if not any(c.covers(frame["type"], err) for c in REFERENCE_WINS)]
    return left, used


# --------------------------------------------------------------- no stack
def test_openai_named_reference_types_all_have_sdk_models() -> None:
    """Tier 1 and 2 are OpenAI's names: the SDK must know each; tier 3 it must not."""
    tiers = reference.server_tiers()
    assert {t for t, tier in tiers.items() if tier in ("1", "2")} - set(SDK_MODELS) == set()
    assert {t for t, tier in tiers.items() if tier == "3"} & set(SDK_MODELS) == set()


# ------------------------------------------------------------ on the stack
class Driver:
    """Sends events with ids and waits for their reply, skipping refused ones."""

    def __init__(self, client: RealtimeClient) -> None:
        self.client = client
        self.skipped: list[str] = []
        self._ids = itertools.count(1)

    async def _send(self, type_: str, expect: set[str], **fields: Any) -> Event:
        event_id = f"evt_sdk_{next(self._ids)}"
        await self.client.send(type_, event_id=event_id, **fields)
        return await self.client.until(
            lambda e: (
                e["type"] in expect
                or (e["type"] == "error" and e["error"].get("event_id") == event_id)
            )
        )

    async def request(self, type_: str, expect: set[str], **fields: Any) -> Event | None:
        reply = await self._send(type_, expect, **fields)
        if reply["type"] != "error":
            return reply
        assert reply["error"]["code"] in SKIPPABLE, reply
        self.skipped.append(type_)
        return None

    async def refused(self, type_: str, code: str, **fields: Any) -> None:
        reply = await self._send(type_, set(), **fields)
        assert reply["error"]["code"] == code, reply

    async def turn(self, text: str, **response: Any) -> list[Event]:
        await self.client.append(spoken(text))
        await self.client.send("input_audio_buffer.commit")
        await self.client.send("response.create", response=response)
        return await self.client.response_cycle()

    async def interrupted_turn(self, text: str, interrupt: str, expect: set[str]) -> None:
        await self.client.append(spoken(text))
        await self.client.send("input_audio_buffer.commit")
        await self.client.send("response.create")
        created = await self.client.until(lambda e: e["type"] == "response.created")
        await self.request(interrupt, expect)
        if not self._ended(created["response_id"]):
            await self.client.until(lambda e: self._ended(created["response_id"]))

    def _ended(self, response_id: str) -> bool:
        """Whether the response's `response.done` and its `rate_limits.updated` arrived."""
        types = [
            e["type"]
            for e in self.client.events
            if e["type"] == "rate_limits.updated"
            or (e["type"] == "response.done" and e["response_id"] == response_id)
        ]
        return "response.done" in types and types[-1] == "rate_limits.updated"


async def _drive_the_whole_surface(client: RealtimeClient) -> Driver:
    d = Driver(client)
    # A handshake-stage error: no session yet, so the gateway answers it itself.
    await client.send("response.create", event_id="evt_sdk_early")
    await client.until(lambda e: e["type"] == "error")
    assert (await client.open(**MANUAL))["type"] == "session.created"
    await d.request("session.update", {"session.updated"}, session={"instructions": "Be brief."})

    # An audio turn, its playback acknowledged, then truncated where the user stopped.
    audio = await d.turn("What is the weather like?")
    done = of_type(audio, "response.done")[0]["response"]
    item_id = done["output"][0]["id"]
    await d.request(
        "playback.ack", {"playback.acknowledged"}, response_id=done["id"], played_ms=200
    )
    await d.request(
        "conversation.item.truncate",
        {"conversation.item.truncated"},
        item_id=item_id,
        content_index=0,
        audio_end_ms=100,
    )

    # A text-only response; a cancelled one; one whose audio the client clears.
    await d.turn("Answer in text.", output_modalities=["text"])
    await d.interrupted_turn("Tell me a story.", "response.cancel", {"response.done"})
    await d.interrupted_turn(
        "Tell me another story.", "output_audio_buffer.clear", {"output_audio_buffer.cleared"}
    )

    # Errors: an empty commit and an unknown event.
    await d.refused("input_audio_buffer.commit", "input_audio_buffer_empty")
    await d.refused("no.such.event", "invalid_event")

    # Items: create, retrieve, delete.
    added = await d.request(
        "conversation.item.create",
        {"conversation.item.added"},
        item={
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": "Summarise what I said."}],
        },
    )
    if added is not None:
        new_id = added["item"]["id"]
        await client.until(
            lambda e: e["type"] == "conversation.item.done" and e["item"]["id"] == new_id
        )
        await d.request(
            "conversation.item.retrieve", {"conversation.item.retrieved"}, item_id=new_id
        )
        await d.request("conversation.item.delete", {"conversation.item.deleted"}, item_id=new_id)

    # Input and output control with nothing in flight, a client-VAD barge-in.
    await d.request("input.cancel", {"input_audio_buffer.cleared"})
    await d.request("input_audio_buffer.clear", {"input_audio_buffer.cleared"})
    await d.request("output_audio_buffer.clear", {"output_audio_buffer.cleared"})
    await d.request("barge_in", {"overlap.decision"})
    await d.request("session.heartbeat", {"session.heartbeat_ack"})
    await d.request("session.close", {"session.closed"})
    return d


async def test_every_raw_frame_validates_against_the_openai_sdk_models(
    client: RealtimeClient,
) -> None:
    driver = await _drive_the_whole_surface(client)
    frames = client.events
    tiers = reference.server_tiers()
    failures: dict[str, list[Any]] = {}
    used: set[Conflict] = set()
    extensions: set[str] = set()
    for frame in frames:
        if frame["type"] not in SDK_MODELS:
            extensions.add(frame["type"])
            continue
        left, hit = sdk_violations(frame)
        used |= hit
        if left:
            failures.setdefault(frame["type"], left)
    assert not failures, failures
    # What the SDK does not know is the reference's duplex-only surface, nothing else.
    assert {t: tiers.get(t) for t in extensions} == {t: "3" for t in extensions}
    assert {"response.speak", "session.heartbeat_ack", "session.closed"} <= extensions
    # The tolerated conflicts are real: the metadata one shows on every response.
    assert REFERENCE_WINS[0] in used
    # Every kind of frame the drive produced was looked at; print what was skipped.
    assert len({f["type"] for f in frames}) > 25, sorted({f["type"] for f in frames})
    print(
        "skipped (refused by the backend):",
        driver.skipped,
        "extensions:",
        sorted(extensions),
        "reference-over-SDK conflicts met:",
        sorted(c.why for c in used),
    )
