"""Client audio encodings through the real serving path (synthetic stages).

The gateway decodes every encoding to PCM16 at the edge and encodes output
to the session's format just before base64; these tests check what a
client hears and what the ASR is given, in milliseconds. They speak the
duplex dialect (`?duplex=1`: float32, WAV on the legacy aliases and the
labelled deltas are its extensions), but for G.711 as OpenAI speaks it.
"""

from __future__ import annotations

import base64
import io
import re
import wave

import numpy as np
import pytest
from stack import LocalStack

from antiphon.common import g711
from tests.support.realtime import Event, RealtimeClient, of_type, realtime_url
from tests.support.speech import spoken

pytestmark = pytest.mark.stack

# The synthetic ASR reports how much 16 kHz audio it was given.
HEARD = re.compile(r"synthetic utterance of (\d+) milliseconds")


@pytest.fixture
def client(duplex_client: RealtimeClient) -> RealtimeClient:
    return duplex_client


ULAW_SESSION = {
    "type": "realtime",
    "audio": {
        "input": {"format": {"type": "audio/pcmu"}, "turn_detection": None},
        "output": {"format": {"type": "audio/pcmu"}},
    },
}


async def _ulaw_question(client: RealtimeClient) -> int:
    """Speak a question in μ-law; the milliseconds it lasts."""
    speech = spoken("What is the capital of France?", 8000)
    ulaw = g711.pcm16_to_ulaw(speech)
    for i in range(0, len(ulaw), 1600):  # 200 ms of 8 kHz, one byte a sample
        chunk = base64.b64encode(ulaw[i : i + 1600]).decode()
        await client.send("input_audio_buffer.append", audio=chunk)
    return len(ulaw) * 1000 // 8000


async def _heard_ms(client: RealtimeClient) -> int:
    """Commit, and the milliseconds the ASR says it transcribed."""
    await client.send("input_audio_buffer.commit")
    done = await client.until(
        lambda e: e["type"] in ("conversation.item.input_audio_transcription.completed", "error")
    )
    assert done["type"] != "error", done
    heard = HEARD.search(done["transcript"])
    assert heard is not None, done["transcript"]
    return int(heard.group(1))


@pytest.mark.models
async def test_g711_ulaw_as_openai_speaks_it(synthetic_stack: LocalStack) -> None:
    """OpenAI's dialect: `audio/pcmu` in and out, echoed as OpenAI echoes it."""
    client = await RealtimeClient.connect(realtime_url(synthetic_stack.ports.gateway))
    try:
        await client.open(**ULAW_SESSION)
        (updated,) = of_type(client.events, "session.updated")
        assert updated["session"]["audio"]["input"]["format"] == {"type": "audio/pcmu"}
        assert updated["session"]["audio"]["output"]["format"] == {"type": "audio/pcmu"}
        speech_ms = await _ulaw_question(client)
        assert abs(await _heard_ms(client) - speech_ms) <= 5
        await client.send("response.create")
        events = await client.response_cycle()
        coded = b"".join(
            base64.b64decode(d["delta"]) for d in of_type(events, "response.output_audio.delta")
        )
        pcm = g711.ulaw_to_pcm16(coded)
        assert len(pcm) // 2 > 8000 // 10  # more than 100 ms of 8 kHz speech
        assert np.abs(np.frombuffer(pcm, dtype="<i2")).mean() > 100
    finally:
        await client.close()


@pytest.mark.models
async def test_g711_ulaw_session_hears_ulaw_and_answers_in_ulaw(client: RealtimeClient) -> None:
    created = await client.open(**ULAW_SESSION)
    session = created["session"]
    # Echoed in both the GA and the beta shapes.
    assert session["audio"]["input"]["format"] == {"type": "audio/pcmu"}
    assert session["audio"]["output"]["format"] == {"type": "audio/pcmu"}
    assert (session["input_audio_format"], session["output_audio_format"]) == (
        "g711_ulaw",
        "g711_ulaw",
    )
    speech_ms = await _ulaw_question(client)
    assert abs(await _heard_ms(client) - speech_ms) <= 5
    await client.send("response.create")
    events = await client.response_cycle()
    deltas = of_type(events, "response.output_audio.delta")
    assert deltas
    assert {(d["format"], d["sample_rate_hz"]) for d in deltas} == {("g711_ulaw", 8000)}
    coded = b"".join(base64.b64decode(d["delta"]) for d in deltas)
    pcm = g711.ulaw_to_pcm16(coded)
    # Decoded, the audio is exactly as long as the response says it is, at 8 kHz.
    total_ms = deltas[-1]["metadata"]["audio_duration_ms"]
    assert len(pcm) // 2 == total_ms * 8000 // 1000
    # And it is the synthetic voice's tone, not noise: energy well above silence.
    assert np.abs(np.frombuffer(pcm, dtype="<i2")).mean() > 100
    done = of_type(events, "response.done")[0]
    assert done["response"]["status"] == "completed"


@pytest.mark.models
async def test_pcm_f32le_append_is_heard_as_long_as_its_pcm16_equivalent(
    client: RealtimeClient,
) -> None:
    await client.open(type="realtime", audio={"input": {"turn_detection": None}})
    speech = spoken("Hello there.", 24000)
    floats = (np.frombuffer(speech, dtype="<i2").astype("<f4") / 32768.0).tobytes()
    await client.append(speech)
    as_pcm16 = await _heard_ms(client)
    await client.append(floats, chunk_bytes=19200, format="pcm_f32le", sample_rate_hz=24000)
    as_f32 = await _heard_ms(client)
    assert as_f32 == as_pcm16
    assert abs(as_pcm16 - len(speech) * 1000 // (2 * 24000)) <= 5


@pytest.mark.models
async def test_wav_on_a_legacy_alias_is_heard_at_its_header_rate(client: RealtimeClient) -> None:
    await client.open(type="realtime", audio={"input": {"turn_detection": None}})
    pcm = spoken("Good morning.", 16000)
    header_and_data = _wav(pcm, 16000)
    await client.send("push_chunk", chunk=base64.b64encode(header_and_data).decode())
    assert abs(await _heard_ms(client) - len(pcm) * 1000 // (2 * 16000)) <= 5


async def test_a_bad_encoding_is_one_error_and_changes_nothing(client: RealtimeClient) -> None:
    await client.open(type="realtime", audio={"input": {"turn_detection": None}})
    await client.send("input_audio_buffer.append", audio="AAAA", format="opus", event_id="evt_opus")
    err = await client.until(lambda e: e["type"] == "error")
    assert err["error"] == {
        "type": "invalid_request_error",
        "code": "unsupported_audio_format",
        "message": "audio format 'opus' is not supported",
        "param": "format",
        "event_id": "evt_opus",
    }
    # Nothing was appended: the commit finds an empty buffer.
    await client.send("input_audio_buffer.commit", event_id="evt_commit")
    empty: Event = await client.until(lambda e: e["type"] == "error")
    assert empty["error"]["code"] == "input_audio_buffer_empty"


def _wav(pcm16: bytes, rate: int) -> bytes:
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(pcm16)
    return buf.getvalue()
