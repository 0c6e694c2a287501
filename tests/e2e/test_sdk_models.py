"""The official `openai` SDK's own pydantic models judge every raw frame we emit.

OpenAI's dialect (`/v1/realtime`, no opt-in) is exactly OpenAI's: a session
driven through every client event OpenAI has (turns, text turns, cancels,
cleared output, truncation, items with tool calls, a call the model makes
and its result, refusals) gets only frames that the SDK's
`RealtimeServerEvent` union and the model of each type accept in strict
mode, with no field the SDK does not declare (but the
session's `id` and `object`, which OpenAI sends too), and no event type
outside OpenAI's catalogue. The test client judges each frame as it arrives
(`RealtimeClient`), so every other test of this dialect is checked too;
here the whole surface is driven on purpose.

The duplex dialect (`?duplex=1`) carries the reference's extensions. Where
the reference and OpenAI's schema disagree there, the reference wins
(DESIGN.md); each such conflict is listed in `REFERENCE_WINS` with why, and
no other validation error is tolerated. Types the SDK does not know must be
the reference's duplex-only (tier 3) extensions.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from pydantic import TypeAdapter, ValidationError

from tests.support import openai_models, reference
from tests.support.openai_models import SERVER_MODELS
from tests.support.realtime import MANUAL, Event, RealtimeClient, of_type
from tests.support.speech import silence, spoken

# A function a response may call (OpenAI's `tools` entry).
WEATHER_TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "Get the current weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}
# An event the bound backend may lack: refused with one of these, it is skipped.
SKIPPABLE = {"unsupported_event", "unsupported_capability"}


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


# The duplex dialect only: OpenAI's dialect has no conflict at all.
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


def reference_violations(frame: Event) -> tuple[list[Any], set[Conflict]]:
    """Validation errors no conflict covers, and the conflicts that covered some."""
    try:
        TypeAdapter(SERVER_MODELS[frame["type"]]).validate_python(frame)
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
    assert {t for t, tier in tiers.items() if tier in ("1", "2")} - set(SERVER_MODELS) == set()
    assert {t for t, tier in tiers.items() if tier == "3"} & set(SERVER_MODELS) == set()


# ------------------------------------------------------------ on the stack
def done(item_id: str) -> Callable[[Event], bool]:
    """Whether an event is `conversation.item.done` of `item_id`."""
    return lambda e: e["type"] == "conversation.item.done" and e["item"]["id"] == item_id


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
        if not self._ended(created["response"]["id"]):
            await self.client.until(lambda e: self._ended(created["response"]["id"]))

    def _ended(self, response_id: str) -> bool:
        """Whether the response's `response.done` and its `rate_limits.updated` arrived."""
        types = [
            e["type"]
            for e in self.client.events
            if e["type"] == "rate_limits.updated"
            or (e["type"] == "response.done" and e["response"]["id"] == response_id)
        ]
        return "response.done" in types and types[-1] == "rate_limits.updated"

    async def tool_turn(self) -> None:
        """A spoken turn held to a call (`tool_choice: required`, the response's
        own tools), then the call's result answered."""
        events = await self.turn(
            "What is the weather in Paris?", tools=[WEATHER_TOOL], tool_choice="required"
        )
        (call,) = of_type(events, "response.done")[0]["response"]["output"]
        assert (call["type"], call["name"]) == ("function_call", "get_weather"), call
        result = {"type": "function_call_output", "call_id": call["call_id"], "output": "sunny"}
        await self.request("conversation.item.create", {"conversation.item.added"}, item=result)
        await self.client.send("response.create")
        await self.client.response_cycle()

    async def items(self) -> None:
        """Create (a message, a tool call and its result), retrieve, delete."""
        message = {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": "Summarise what I said."}],
        }
        call = {"type": "function_call", "name": "get_time", "arguments": "{}"}
        created: list[Event] = []
        for item in (message, call):
            added = await self.request(
                "conversation.item.create", {"conversation.item.added"}, item=item
            )
            if added is not None:
                created.append(added["item"])
                await self.client.until(done(added["item"]["id"]))
        if len(created) == 2:
            # The call got a call_id from the session: its result names it.
            output = {
                "type": "function_call_output",
                "call_id": created[1]["call_id"],
                "output": "noon",
            }
            await self.request("conversation.item.create", {"conversation.item.added"}, item=output)
        for item_id in (c["id"] for c in created):
            await self.request(
                "conversation.item.retrieve", {"conversation.item.retrieved"}, item_id=item_id
            )
            await self.request(
                "conversation.item.delete", {"conversation.item.deleted"}, item_id=item_id
            )


async def _drive_openai_s_surface(client: RealtimeClient) -> Driver:
    """Every OpenAI client event on OpenAI's dialect, as a stock client sends them."""
    d = Driver(client)
    # OpenAI's dialect opened on connect: an append before any update is heard.
    created = await client.until(lambda e: e["type"] == "session.created")
    assert created["session"]["audio"]["input"]["turn_detection"]["type"] == "server_vad"
    await d.request(
        "session.update",
        {"session.updated"},
        session={**MANUAL, "instructions": None, "output_modalities": ["audio"]},
    )

    # An audio turn (its request named in its metadata), then truncated where the user stopped.
    audio = await d.turn("What is the weather like?", metadata={"client_event_id": "evt_a"})
    done = of_type(audio, "response.done")[0]["response"]
    assert done["metadata"] == {"client_event_id": "evt_a"}
    await d.request(
        "conversation.item.truncate",
        {"conversation.item.truncated"},
        item_id=done["output"][0]["id"],
        content_index=0,
        audio_end_ms=100,
    )

    # A text-only response; a cancelled one; one whose audio the client clears.
    await d.turn("Answer in text.", output_modalities=["text"], instructions=None)
    await d.interrupted_turn("Tell me a story.", "response.cancel", {"response.done"})
    await d.interrupted_turn(
        "Tell me another story.", "output_audio_buffer.clear", {"output_audio_buffer.cleared"}
    )

    # Refusals: an empty commit, a duplex extension, an unknown item, a cancel of nothing.
    await d.refused("input_audio_buffer.commit", "input_audio_buffer_commit_empty")
    await d.refused("session.heartbeat", "invalid_value")
    await d.refused("conversation.item.retrieve", "item_retrieve_invalid_item_id", item_id="x")
    await d.refused("response.cancel", "response_cancel_not_active")

    await d.items()
    await d.tool_turn()

    # Input and output control with nothing in flight.
    await d.request("input_audio_buffer.clear", {"input_audio_buffer.cleared"})
    await d.request("output_audio_buffer.clear", {"output_audio_buffer.cleared"})

    # Server VAD: a detected turn, answered.
    vad = {"type": "realtime", "audio": {"input": {"turn_detection": {"type": "server_vad"}}}}
    await d.request("session.update", {"session.updated"}, session=vad)
    await client.append(silence(300) + spoken("What time is it?") + silence(900))
    await client.response_cycle()
    return d


@pytest.mark.stack
@pytest.mark.models
async def test_every_frame_of_openai_s_dialect_validates_strictly(client: RealtimeClient) -> None:
    driver = await _drive_openai_s_surface(client)
    frames = client.events
    failures = {i: openai_models.violations(f) for i, f in enumerate(frames)}
    assert {i: v for i, v in failures.items() if v} == {}
    types = {f["type"] for f in frames}
    assert types <= set(SERVER_MODELS)  # nothing outside OpenAI's catalogue
    assert len(types) > 25, sorted(types)
    assert frames[0]["type"] == "session.created"
    assert not driver.skipped, driver.skipped
    # OpenAI's own error codes and reasons.
    codes = {f["error"]["code"] for f in of_type(frames, "error")}
    assert codes == {
        "input_audio_buffer_commit_empty",
        "invalid_value",
        "item_retrieve_invalid_item_id",
        "response_cancel_not_active",
    }
    reasons = {
        (r["status"], (r["status_details"] or {}).get("reason"))
        for r in (f["response"] for f in of_type(frames, "response.done"))
    }
    assert reasons == {("completed", None), ("cancelled", "client_cancelled")}
    # Every commit names its item.
    assert all(f["item_id"] for f in of_type(frames, "input_audio_buffer.committed"))


async def _drive_the_duplex_surface(client: RealtimeClient) -> Driver:
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

    await d.items()
    await d.tool_turn()

    # Input and output control with nothing in flight, a client-VAD barge-in.
    await d.request("input.cancel", {"input_audio_buffer.cleared"})
    await d.request("input_audio_buffer.clear", {"input_audio_buffer.cleared"})
    await d.request("output_audio_buffer.clear", {"output_audio_buffer.cleared"})
    await d.request("barge_in", {"overlap.decision"})
    await d.request("session.heartbeat", {"session.heartbeat_ack"})
    await d.request("session.close", {"session.closed"})
    return d


@pytest.mark.stack
@pytest.mark.models
async def test_the_duplex_dialect_differs_from_openai_only_where_the_reference_wins(
    duplex_client: RealtimeClient,
) -> None:
    driver = await _drive_the_duplex_surface(duplex_client)
    frames = duplex_client.events
    tiers = reference.server_tiers()
    failures: dict[str, list[Any]] = {}
    used: set[Conflict] = set()
    extensions: set[str] = set()
    for frame in frames:
        if frame["type"] not in SERVER_MODELS:
            extensions.add(frame["type"])
            continue
        left, hit = reference_violations(frame)
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
