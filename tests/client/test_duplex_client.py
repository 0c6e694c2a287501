"""`DuplexClient` against the serving path (synthetic stages, the real gateway,
session service and Redis): both dialects, a drop mid-answer resumed inside
the client with every event exactly once, and the errors a user meets."""

from __future__ import annotations

import pytest
from stack import LocalStack, free_port

from antiphon.client import (
    DuplexClient,
    EventCollector,
    Microphone,
    ProtocolError,
    Refused,
    ServerUnreachable,
)
from antiphon.client.events import InputTranscript, Resumed
from bench.lib.tcpproxy import TcpProxy
from tests.support.speech import spoken

pytestmark = pytest.mark.stack
MANUAL = {"type": "realtime", "audio": {"input": {"turn_detection": None}}}


def url(port: int, query: str = "?duplex=1") -> str:
    return f"ws://127.0.0.1:{port}/v1/realtime{query}"


@pytest.mark.parametrize("query", ["?duplex=1", ""], ids=["duplex", "openai"])
async def test_a_text_turn_is_answered_with_audio_and_its_words(
    synthetic_stack: LocalStack, query: str
) -> None:
    async with DuplexClient(url(synthetic_stack.ports.gateway, query), session=MANUAL) as client:
        assert client.session_id.startswith("sess_")
        assert bool(client.resume_token) == (query != "")
        await client.say("What is the capital of France?")
        await client.create_response()
        answer = await client.next_response(timeout=60)
    assert answer.status == "completed"
    assert answer.transcript.strip()
    # Speech of the transcript's length at 24 kHz: at least a tenth of a second a word.
    assert len(answer.audio) >= 24000 * 2 * 0.1 * len(answer.transcript.split())


async def test_a_drop_mid_answer_resumes_inside_the_client_with_every_event_once(
    slow_synthetic_stack: LocalStack,
) -> None:
    proxy = TcpProxy(("127.0.0.1", slow_synthetic_stack.ports.gateway), free_port())
    await proxy.start()
    collector = EventCollector()
    try:
        async with DuplexClient(url(proxy.port), session=MANUAL) as client:
            client.add_listener(collector.record)
            await client.say("Tell me about the sea.")
            await client.create_response()
            async for response in client.responses():
                await client.wait_for("response.output_audio.delta", timeout=30)
                await proxy.cut(0.5)  # the network goes, no close frame
                await response.wait(timeout=60)
                break
            assert client.resumes == 1
            # Resumed, the session answers the next turn in full.
            await client.say("And now?")
            await client.create_response()
            again = await client.next_response(timeout=60)
            assert again.status == "completed"
    finally:
        await proxy.close()
    # `session.resumed` names the cursor it resumed from; every other event its own seq.
    seqs = [e.seq for e in collector.events if e.seq is not None and e.type != "session.resumed"]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))  # none lost, none twice
    assert sum(isinstance(e, Resumed) for e in collector.events) == 1
    # The answer cut by the drop ended as the server ended it, told once.
    assert (response.status, response.done_event and response.done_event.reason) == (
        "cancelled",
        "client_disconnected",
    )


@pytest.mark.models
async def test_server_vad_hears_a_live_microphone_and_the_collector_times_it(
    synthetic_stack: LocalStack,
) -> None:
    collector = EventCollector()
    vad = {"type": "realtime", "audio": {"input": {"turn_detection": {"type": "server_vad"}}}}
    async with DuplexClient(url(synthetic_stack.ports.gateway), session=vad) as client:
        client.add_listener(collector.record)
        async with Microphone(client) as mic:
            responses = client.responses()
            collector.mark_end_of_speech(await mic.say(spoken("What is the capital of France?")))
            answer = await anext(responses)
            await answer.wait(timeout=60)
            await responses.aclose()
    heard = [e for e in collector.events if isinstance(e, InputTranscript)]
    assert heard and heard[0].transcript.strip()
    [timing] = collector.timings()
    assert timing.status == "completed"
    assert timing.end_of_speech_to_first_audio_ms is not None
    assert 0 < timing.end_of_speech_to_first_audio_ms < 10_000
    assert timing.audio_ms > 0 and len(timing.chunk_gaps_ms) >= 1


async def test_an_error_answering_a_request_is_raised_where_it_was_awaited(
    synthetic_stack: LocalStack,
) -> None:
    async with DuplexClient(url(synthetic_stack.ports.gateway), session=MANUAL) as client:
        with pytest.raises(ProtocolError) as refused:
            await client.request(
                {"type": "input_audio_buffer.commit"}, "input_audio_buffer.committed"
            )
        assert refused.value.code == "input_audio_buffer_empty"


async def test_a_server_that_is_down_or_refuses_is_said_plainly(auth_stack: LocalStack) -> None:
    with pytest.raises(ServerUnreachable):
        await DuplexClient(url(free_port())).open()
    with pytest.raises(Refused) as refused:
        await DuplexClient(url(auth_stack.ports.gateway), api_key="sk-wrong").open()
    assert refused.value.status == 401
