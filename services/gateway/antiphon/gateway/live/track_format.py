"""The GPT-Live output track in the client's `audio.format`.

GPT-Live has one format for both directions: `audio/pcm` at 16 or 24 kHz,
or G.711 (`audio/pcmu`, `audio/pcma`) at 8 kHz. The session speaks PCM16 at
24 kHz (`PCM_OUTPUT_RATE`) on this surface whatever the client's format,
and the track is converted here, as one stream: it is continuous (silence
included), so one resampler's filter state runs across every chunk and the
chunk boundaries leave no clicks, which resampling each delta on its own
would not.
"""

from __future__ import annotations

from antiphon.common.audio import StreamResampler
from antiphon.common.audio_formats import G711, G711_ALAW, G711_RATE, PCM_OUTPUT_RATE
from antiphon.common.g711 import pcm16_to_alaw, pcm16_to_ulaw
from antiphon.v1 import common_pb2 as cpb

# What the track is made of: the session's own output on this surface.
TRACK_RATE = PCM_OUTPUT_RATE


class TrackFormat:
    """PCM16 at `TRACK_RATE`, chunk by chunk, as `fmt` (stateful)."""

    def __init__(self, fmt: cpb.AudioFormat) -> None:
        self.encoding = fmt.encoding
        self.rate = G711_RATE if fmt.encoding in G711 else fmt.sample_rate_hz
        self._resampler = StreamResampler(TRACK_RATE, self.rate)

    def convert(self, pcm16: bytes) -> bytes:
        out = self._resampler.process(pcm16)
        if self.encoding not in G711:
            return out
        return pcm16_to_alaw(out) if self.encoding == G711_ALAW else pcm16_to_ulaw(out)
