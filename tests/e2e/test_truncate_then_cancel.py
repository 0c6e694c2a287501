"""Interrupting as the OpenAI SDKs do: truncate the reply being said, then cancel it.

The Agents SDK sends `conversation.item.truncate` for what was played and
then `response.cancel`. The truncate already stops the reply, so the cancel
that follows finds nothing to do, and must not come back as an error.
"""

from __future__ import annotations

import pytest

from tests.support.realtime import MANUAL, RealtimeClient, of_type

pytestmark = pytest.mark.stack

HELLO = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}


async def test_cancel_after_truncating_the_reply_being_said_is_no_error(
    slow_client: RealtimeClient,
) -> None:
    await slow_client.open(**MANUAL)
    await slow_client.send("conversation.item.create", item=HELLO)
    await slow_client.send("response.create")
    delta = await slow_client.until(lambda e: e["type"] == "response.output_audio.delta")
    await slow_client.send(
        "conversation.item.truncate", item_id=delta["item_id"], content_index=0, audio_end_ms=0
    )
    await slow_client.send("response.cancel")
    done = await slow_client.until(lambda e: e["type"] == "response.done")
    assert done["response"]["status"] == "cancelled"
    await slow_client.until(lambda e: e["type"] == "conversation.item.truncated")
    # Only that one cancel is forgiven: another, with nothing active, is OpenAI's
    # error. Answered in order, it also shows that the first cancel had none.
    await slow_client.send("response.cancel")
    late = await slow_client.until(lambda e: e["type"] == "error")
    assert late["error"]["code"] == "response_cancel_not_active"
    errors = of_type(slow_client.events, "error")
    assert errors == [late], errors
