"""`ResponseState.audio_events`: the session encodes each audio delta in its
output format, and the delta names the encoding and rate its bytes are in."""

from __future__ import annotations

import numpy as np

from antiphon.common import g711
from antiphon.common.audio import float32_to_pcm16
from antiphon.session.assistant.responses import ResponseOptions, ResponseState
from antiphon.v1 import common_pb2 as cpb
from antiphon.v1 import session_pb2 as spb


def _response() -> ResponseState:
    options = ResponseOptions(
        instructions="", output_modalities=["audio"], temperature=0.0, max_output_tokens=0
    )
    return ResponseState(
        id="resp_1",
        item_id="item_1",
        session_id="sess_1",
        epoch=2,
        turn_id=1,
        previous_item_id="",
        options=options,
    )


def _delta(pcm: bytes, rate: int, fmt: cpb.AudioFormat) -> spb.AudioDelta:
    marks = [cpb.AudioTextMark(text_chars=2, audio_end_ms=100)]
    (kind, delta), (paired, text) = _response().audio_events(pcm, rate, "Hi", 100, marks, fmt)
    assert (kind, paired) == ("audio_delta", "audio_transcript_delta")
    assert isinstance(delta, spb.AudioDelta) and isinstance(text, spb.TextDelta)
    assert text.delta == "Hi"
    return delta


def test_a_pcm16_session_s_deltas_carry_the_voice_s_pcm16_at_its_rate() -> None:
    pcm = float32_to_pcm16(np.linspace(-0.5, 0.5, 2400))
    delta = _delta(pcm, 24000, cpb.AudioFormat(encoding="pcm16", sample_rate_hz=24000))
    assert delta.audio == pcm
    assert delta.format == cpb.AudioFormat(encoding="pcm16", sample_rate_hz=24000)
    assert (delta.audio_duration_ms, delta.epoch, delta.session_id) == (100, 2, "sess_1")


def test_a_g711_session_s_deltas_are_g711_bytes_at_8khz() -> None:
    """Encoded once, here: the journal holds what the client hears, and the
    gateway only base64s it under the encoding the delta names."""
    at8k = float32_to_pcm16(np.linspace(-0.5, 0.5, 800))
    ulaw = _delta(at8k, 8000, cpb.AudioFormat(encoding="g711_ulaw", sample_rate_hz=8000))
    assert ulaw.audio == g711.pcm16_to_ulaw(at8k)
    assert ulaw.format == cpb.AudioFormat(encoding="g711_ulaw", sample_rate_hz=8000)
    alaw = _delta(at8k, 8000, cpb.AudioFormat(encoding="g711_alaw", sample_rate_hz=8000))
    assert alaw.audio == g711.pcm16_to_alaw(at8k)
    # A voice at another rate is resampled to G.711's 8 kHz: one byte per sample.
    at24k = float32_to_pcm16(np.linspace(-0.5, 0.5, 2400))
    resampled = _delta(at24k, 24000, cpb.AudioFormat(encoding="g711_ulaw", sample_rate_hz=8000))
    assert (len(resampled.audio), resampled.format.sample_rate_hz) == (800, 8000)
