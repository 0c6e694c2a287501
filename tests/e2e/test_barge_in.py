"""Barge-in on the serving path: the user talks over the assistant, who stops.

The `synthetic` stages speak slowly here (one word per 300 ms), so a reply
is still playing when the user starts again; the VAD is the real Silero.
The client speaks OpenAI's dialect, as a stock client does: the reply ends
`cancelled` with OpenAI's reason, `turn_detected`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from stack import LocalStack

from tests.support.realtime import Event, RealtimeClient, of_type, realtime_url
from tests.support.speech import silence, spoken

pytestmark = [pytest.mark.stack, pytest.mark.models]

AUDIO_DELTA = "response.output_audio.delta"


@pytest.fixture
async def client(slow_synthetic_stack: LocalStack) -> AsyncIterator[RealtimeClient]:
    c = await RealtimeClient.connect(realtime_url(slow_synthetic_stack.ports.gateway))
    try:
        yield c
    finally:
        await c.close()


async def first_audio(client: RealtimeClient) -> Event:
    return await client.until(lambda e: e["type"] == AUDIO_DELTA, timeout=30)


async def test_speech_over_the_reply_cancels_it_and_no_later_audio_of_it_arrives(
    client: RealtimeClient,
) -> None:
    await client.open(type="realtime")
    await client.append(silence(300) + spoken("What time is it?") + silence(1000))
    first = await first_audio(client)
    interrupted = first["response_id"]  # OpenAI's delta names its response

    await client.append(spoken("Stop, tell me something else.") + silence(1000))
    start = len(client.events)
    done = await client.until(lambda e: e["type"] == "response.done", timeout=30)
    seen = client.events[start:]
    assert done["response"]["id"] == interrupted
    assert done["response"]["status"] == "cancelled", [e["type"] for e in seen]
    assert done["response"]["status_details"]["reason"] == "turn_detected"
    types = [e["type"] for e in seen]
    assert "input_audio_buffer.speech_started" in types
    assert types.index("input_audio_buffer.speech_started") < types.index("response.done")

    # The interruption becomes the next turn, answered in full; nothing of the
    # cancelled reply arrives after its response.done.
    rest = await client.response_cycle()
    assert not [e for e in rest if e.get("response_id") == interrupted]
    assert of_type(rest, "input_audio_buffer.committed")
    assert of_type(rest, "response.done")[0]["response"]["status"] == "completed"


async def test_interrupt_response_false_lets_the_reply_finish(client: RealtimeClient) -> None:
    await client.open(
        type="realtime",
        audio={"input": {"turn_detection": {"type": "server_vad", "interrupt_response": False}}},
    )
    await client.append(silence(300) + spoken("What time is it?") + silence(1000))
    first = await first_audio(client)
    await client.append(spoken("Hello there.") + silence(200))
    done = await client.until(lambda e: e["type"] == "response.done", timeout=30)
    assert done["response"]["id"] == first["response_id"]
    assert done["response"]["status"] == "completed"
