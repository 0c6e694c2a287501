"""A delegated answer's typed events -> GPT-Live `response.event` envelopes.

The session tells a delegate LLM's answer (`Response.delegated`) in the
same typed events as any text response; GPT-Live wraps each in a
`response.event` whose `event` is a Responses streaming event: the
lifecycle (`response.created`, `.completed` / `.failed` / `.incomplete`, as
reduced snapshots with no output), the output items (a message with
`output_text`, `function_call`s with their arguments) and the text deltas.
Conversation item events and everything of the voice model's own
responses are not in it. `delegation_id` is null: the voice model behind
this surface never delegates by itself, so each delegated answer is the
application's own `response.create` (docs/gpt-live.md).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from antiphon.common.event_kinds import EventKind, body_of
from antiphon.common.ids import new_id
from antiphon.v1 import common_pb2 as cpb
from antiphon.v1 import session_pb2 as spb

Json = dict[str, Any]

_TERMINAL = {"completed": "response.completed", "failed": "response.failed"}


class ResponsesStream:
    def __init__(self, model: Callable[[], str]) -> None:
        self._model = model  # the delegation's `responses.model` now, echoed
        self._delegated: set[str] = set()
        self._sequence = 0

    def __call__(self, kind: EventKind, ev: spb.ServerEvent) -> list[Json] | None:
        """The envelopes of a delegated answer's event; None when it is no
        delegated answer's (the caller projects it as it would)."""
        body = body_of(ev, kind)
        match kind:
            case "response_created" if body.response.delegated:
                self._delegated.add(body.response.id)
                return self._wrap({"type": "response.created", "response": self._snap(body)})
            case "response_done" if body.response.id in self._delegated:
                self._delegated.discard(body.response.id)
                status = body.response.status
                ended = _TERMINAL.get(status, "response.incomplete")
                return self._wrap({"type": ended, "response": self._snap(body)})
            case "output_item_added" | "output_item_done" if body.response_id in self._delegated:
                suffix = "added" if kind == "output_item_added" else "done"
                return self._wrap(
                    {
                        "type": f"response.output_item.{suffix}",
                        "output_index": body.output_index,
                        "item": _item(body.item),
                    }
                )
            case "text_delta" if body.ref.response_id in self._delegated:
                return self._wrap(
                    {"type": "response.output_text.delta", **_ref(body.ref), "delta": body.delta}
                )
            case "text_done" if body.ref.response_id in self._delegated:
                return self._wrap(
                    {"type": "response.output_text.done", **_ref(body.ref), "text": body.text}
                )
            case "content_part_added" | "content_part_done" if (
                body.ref.response_id in self._delegated
            ):
                suffix = "added" if kind == "content_part_added" else "done"
                part = {"type": "output_text", "text": body.part.text, "annotations": []}
                return self._wrap(
                    {"type": f"response.content_part.{suffix}", **_ref(body.ref), "part": part}
                )
            case "function_call_arguments_delta" | "function_call_arguments_done" if (
                body.ref.response_id in self._delegated
            ):
                event: Json = {
                    "type": "response.function_call_arguments."
                    + ("delta" if kind.endswith("delta") else "done"),
                    "item_id": body.ref.item_id,
                    "output_index": body.ref.output_index,
                }
                if kind.endswith("delta"):
                    event["delta"] = body.arguments
                else:
                    event |= {"arguments": body.arguments, "name": body.name}
                return self._wrap(event)
            case "item_added" | "item_created" | "item_done" if self._delegated:
                return []  # the conversation's, not the Responses stream's
        return None

    def _wrap(self, event: Json) -> list[Json]:
        event["sequence_number"] = self._sequence
        self._sequence += 1
        return [
            {
                "type": "response.event",
                "event_id": new_id("event"),
                "delegation_id": None,
                "event": event,
            }
        ]

    def _snap(self, body: spb.ResponseEvent) -> Json:
        """A lifecycle snapshot: reduced, as OpenAI's are (no output, no input)."""
        r = body.response
        snap: Json = {
            "id": r.id,
            "object": "response",
            "created_at": int(time.time()),
            "status": r.status,
            "model": self._model(),
            "output": [],
        }
        if r.status == "failed":
            snap["error"] = {"code": r.status_reason or "server_error", "message": r.status_reason}
        elif r.status not in ("completed", "in_progress"):
            snap["incomplete_details"] = {"reason": r.status_reason or r.status}
        return snap


def _ref(ref: spb.PartRef) -> Json:
    return {
        "item_id": ref.item_id,
        "output_index": ref.output_index,
        "content_index": ref.content_index,
    }


def _item(item: cpb.Item) -> Json:
    if item.type == "function_call":
        return {
            "type": "function_call",
            "id": item.id,
            "call_id": item.call_id,
            "name": item.name,
            "arguments": item.arguments,
            "status": item.status,
        }
    return {
        "type": "message",
        "id": item.id,
        "role": "assistant",
        "status": item.status,
        "content": [
            {"type": "output_text", "text": part.text, "annotations": []} for part in item.content
        ],
    }
