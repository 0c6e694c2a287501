"""Client audio encodings <-> PCM16, at the WebSocket edge.

Past the gateway audio is always PCM16 mono (`AudioFormat` in common.proto),
so every encoding a client may send is decoded here, once, and PCM16 output
is encoded to the session's output encoding just before base64. The encodings:

- `pcm16`: little-endian signed 16-bit, passed through;
- `pcm_f32le`: little-endian float32, clipped to PCM16;
- `g711_ulaw` / `g711_alaw`: ITU-T G.711 at 8 kHz (OpenAI's `audio/pcmu` /
  `audio/pcma`), through 256-entry decode and 65536-entry encode tables;
- `wav`: a RIFF/WAVE container (per event only) holding mono PCM16 or float32,
  whose header names the sample rate.

G.711 is written out from the ITU definition rather than taken from
`audioop`, which Python 3.13 removed.
"""

from __future__ import annotations

import functools
import struct
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from antiphon.common.audio import float32_to_pcm16, resample_pcm16
from antiphon.v1 import common_pb2 as cpb
from antiphon.v1 import session_pb2 as spb

PCM16 = "pcm16"
PCM_F32LE = "pcm_f32le"
G711_ULAW = "g711_ulaw"
G711_ALAW = "g711_alaw"
WAV = "wav"

G711 = (G711_ULAW, G711_ALAW)
G711_RATE = 8000
# Raw PCM declares no rate of its own: the session's, or one of these per event.
PCM_RATES = (16000, 24000)
# Every rate an append may carry once decoded; the session resamples each
# once. Equal to the session service's `session_config.INPUT_RATES`.
APPEND_RATES = (8000, 11025, 16000, 22050, 24000, 32000, 44100, 48000)

# What a session may declare for its input and output audio.
INPUT_ENCODINGS = (PCM16, PCM_F32LE, G711_ULAW, G711_ALAW)
OUTPUT_ENCODINGS = (PCM16, G711_ULAW, G711_ALAW)

# Wire spellings -> encoding: beta strings, GA `format.type`s, and `wav`.
NAMES = {
    "pcm16": PCM16,
    "pcm": PCM16,
    "audio/pcm": PCM16,
    "pcm_f32le": PCM_F32LE,
    "g711_ulaw": G711_ULAW,
    "audio/pcmu": G711_ULAW,
    "g711_alaw": G711_ALAW,
    "audio/pcma": G711_ALAW,
    "wav": WAV,
    "audio/wav": WAV,
}

_GA_TYPES = {
    PCM16: "audio/pcm",
    PCM_F32LE: "audio/pcm",
    G711_ULAW: "audio/pcmu",
    G711_ALAW: "audio/pcma",
}

_WAVE_PCM = 1
_WAVE_FLOAT = 3
_WAVE_EXTENSIBLE = 0xFFFE
# A streaming WAV writer cannot know the data length up front.
_WAVE_UNKNOWN_SIZE = (0, 0xFFFFFFFF)


class AudioDecodeError(ValueError):
    """Client audio that cannot be turned into PCM16; `code` is the error code."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Pcm:
    """Decoded audio; `sample_rate_hz` 0 means the encoding names no rate."""

    pcm16: bytes
    sample_rate_hz: int


def decode(data: bytes, encoding: str) -> Pcm:
    """Client audio of `encoding` as PCM16; raises AudioDecodeError."""
    if encoding == PCM16:
        if len(data) % 2:
            raise AudioDecodeError("invalid_audio", "pcm16 audio must have an even number of bytes")
        return Pcm(data, 0)
    if encoding == PCM_F32LE:
        return Pcm(f32le_to_pcm16(data), 0)
    if encoding == G711_ULAW:
        return Pcm(ulaw_to_pcm16(data), G711_RATE)
    if encoding == G711_ALAW:
        return Pcm(alaw_to_pcm16(data), G711_RATE)
    if encoding == WAV:
        return wav_to_pcm16(data)
    raise AudioDecodeError("unsupported_audio_format", f"audio encoding {encoding!r} is unknown")


def encode(pcm16: bytes, rate: int, fmt: cpb.AudioFormat) -> Pcm:
    """PCM16 at `rate` in the output format `fmt` (G.711 is resampled to 8 kHz
    first when the audio is at another rate)."""
    if fmt.encoding not in G711:
        return Pcm(pcm16, rate)
    if rate != G711_RATE:
        # Whole-chunk resampling: chunks are clauses that begin and end in
        # near-silence, so no filter state needs to cross a chunk boundary.
        pcm16 = resample_pcm16(pcm16, rate, G711_RATE)
    coded = pcm16_to_ulaw(pcm16) if fmt.encoding == G711_ULAW else pcm16_to_alaw(pcm16)
    return Pcm(coded, G711_RATE)


def encode_delta(ev: spb.ServerEvent) -> str | None:
    """Encode an audio delta in place, in the output format its session made
    it for (`AudioDelta.format`); other events pass untouched.

    The format rides on each delta, journaled with it, rather than being
    learned from the `session.*` events a socket happens to relay: a socket
    that resumed the session (and saw no `session.created`), or a replay
    that crosses a later `session.update`, encodes each delta as it was meant.
    Returns the wire `format` of an encoded delta (None otherwise); the
    projector labels deltas `pcm16`, so the caller relabels with it.
    """
    if ev.WhichOneof("kind") != "audio_delta":
        return None
    delta = ev.audio_delta
    if delta.format.encoding not in G711:
        return None
    coded = encode(delta.pcm16, delta.sample_rate_hz, delta.format)
    delta.pcm16, delta.sample_rate_hz = coded.pcm16, coded.sample_rate_hz
    return delta.format.encoding


def ga_format(fmt: cpb.AudioFormat) -> dict[str, Any]:
    """The GA `audio.*.format` object of a session format.

    OpenAI has no float32 type: `pcm_f32le` is `audio/pcm` plus an
    `encoding` key that stock clients ignore.
    """
    encoding = fmt.encoding or PCM16
    out: dict[str, Any] = {"type": _GA_TYPES.get(encoding, "audio/pcm")}
    if encoding not in G711:
        out["rate"] = fmt.sample_rate_hz
    if encoding == PCM_F32LE:
        out["encoding"] = PCM_F32LE
    return out


# ------------------------------------------------------------------ float32
def f32le_to_pcm16(data: bytes) -> bytes:
    if len(data) % 4:
        raise AudioDecodeError(
            "invalid_audio", "pcm_f32le audio must be a whole number of 4-byte samples"
        )
    return float32_to_pcm16(np.frombuffer(data, dtype="<f4"))


# -------------------------------------------------------------------- G.711
def ulaw_to_pcm16(data: bytes) -> bytes:
    return _ulaw_decode_table()[np.frombuffer(data, dtype=np.uint8)].tobytes()


def alaw_to_pcm16(data: bytes) -> bytes:
    return _alaw_decode_table()[np.frombuffer(data, dtype=np.uint8)].tobytes()


def pcm16_to_ulaw(pcm16: bytes) -> bytes:
    return _ulaw_encode_table()[_as_index(pcm16)].tobytes()


def pcm16_to_alaw(pcm16: bytes) -> bytes:
    return _alaw_encode_table()[_as_index(pcm16)].tobytes()


def _as_index(pcm16: bytes) -> npt.NDArray[np.uint16]:
    if len(pcm16) % 2:
        raise ValueError(f"PCM16 needs an even number of bytes, got {len(pcm16)}")
    # The int16 bit pattern indexes the 65536-entry encode table.
    return np.frombuffer(pcm16, dtype="<i2").astype(np.int16).view(np.uint16)


def _frozen(a: npt.NDArray[Any]) -> npt.NDArray[Any]:
    a.flags.writeable = False
    return a


# G.711 µ-law: the 14-bit magnitude plus a bias of 33 falls in one of eight
# segments (a power-of-two range); the code is sign, segment, and the four
# bits below the segment's leading one, all inverted.
_ULAW_BIAS = 0x84  # 33 in 14-bit units, scaled to 16 bits
_ULAW_CLIP = 8159
_ULAW_SEGMENT_ENDS = np.array([0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF, 0x1FFF])
# G.711 A-law: the 13-bit magnitude in eight segments; the first two share a
# step size; even bits are inverted (XOR 0x55) on the line.
_ALAW_SEGMENT_ENDS = np.array([0x1F, 0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF])


@functools.cache
def _ulaw_decode_table() -> npt.NDArray[np.int16]:
    u = ~np.arange(256, dtype=np.int32) & 0xFF
    t = (((u & 0x0F) << 3) + _ULAW_BIAS) << ((u & 0x70) >> 4)
    return _frozen(np.where(u & 0x80, _ULAW_BIAS - t, t - _ULAW_BIAS).astype("<i2"))


@functools.cache
def _alaw_decode_table() -> npt.NDArray[np.int16]:
    a = np.arange(256, dtype=np.int32) ^ 0x55
    seg = (a & 0x70) >> 4
    t = (a & 0x0F) << 4
    t = np.where(seg == 0, t + 8, (t + 0x108) << np.maximum(seg - 1, 0))
    return _frozen(np.where(a & 0x80, t, -t).astype("<i2"))


@functools.cache
def _ulaw_encode_table() -> npt.NDArray[np.uint8]:
    x = np.arange(65536, dtype=np.int32).astype(np.uint16).view(np.int16).astype(np.int32) >> 2
    mask = np.where(x < 0, 0x7F, 0xFF)
    mag = np.minimum(np.abs(x), _ULAW_CLIP) + (_ULAW_BIAS >> 2)
    seg = np.searchsorted(_ULAW_SEGMENT_ENDS, mag)
    code = np.where(seg >= 8, 0x7F, (seg << 4) | ((mag >> (seg + 1)) & 0x0F))
    return _frozen(((code ^ mask) & 0xFF).astype(np.uint8))


@functools.cache
def _alaw_encode_table() -> npt.NDArray[np.uint8]:
    x = np.arange(65536, dtype=np.int32).astype(np.uint16).view(np.int16).astype(np.int32) >> 3
    mask = np.where(x >= 0, 0xD5, 0x55)
    # One's complement for negatives: -1 and 0 land in the two smallest steps.
    mag = np.where(x >= 0, x, -x - 1)
    seg = np.searchsorted(_ALAW_SEGMENT_ENDS, mag)
    quant = np.where(seg < 2, mag >> 1, mag >> np.maximum(seg, 1)) & 0x0F
    code = np.where(seg >= 8, 0x7F, (seg << 4) | quant)
    return _frozen(((code ^ mask) & 0xFF).astype(np.uint8))


# ---------------------------------------------------------------------- WAV
def wav_to_pcm16(data: bytes) -> Pcm:
    """A mono PCM16 or float32 RIFF/WAVE file as PCM16 at its header's rate."""
    if len(data) < 12 or data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        raise AudioDecodeError("invalid_audio", "audio is not a WAV file (no RIFF/WAVE header)")
    fmt: tuple[int, int, int, int] | None = None
    pos = 12
    while pos + 8 <= len(data):
        chunk_id = data[pos : pos + 4]
        (size,) = struct.unpack_from("<I", data, pos + 4)
        body = pos + 8
        if chunk_id == b"fmt ":
            if size < 16 or body + size > len(data):
                raise AudioDecodeError("invalid_audio", "the WAV fmt chunk is truncated")
            tag, channels, rate, _, _, bits = struct.unpack_from("<HHIIHH", data, body)
            if tag == _WAVE_EXTENSIBLE and size >= 40:
                # The SubFormat GUID starts with the plain format tag.
                (tag,) = struct.unpack_from("<H", data, body + 24)
            fmt = (tag, channels, rate, bits)
        elif chunk_id == b"data":
            if fmt is None:
                raise AudioDecodeError("invalid_audio", "the WAV data chunk precedes its fmt chunk")
            end = len(data) if size in _WAVE_UNKNOWN_SIZE else min(body + size, len(data))
            return _wav_samples(data[body:end], *fmt)
        pos = body + size + (size & 1)  # chunks are padded to an even length
    raise AudioDecodeError("invalid_audio", "the WAV file has no data chunk")


def _wav_samples(samples: bytes, tag: int, channels: int, rate: int, bits: int) -> Pcm:
    if channels != 1:
        raise AudioDecodeError(
            "unsupported_audio_format", f"WAV audio must be mono, not {channels} channels"
        )
    if rate not in APPEND_RATES:
        raise AudioDecodeError(
            "unsupported_audio_format",
            f"WAV sample rate {rate} Hz is not supported; use one of {APPEND_RATES}",
        )
    if (tag, bits) == (_WAVE_PCM, 16):
        return Pcm(decode(samples, PCM16).pcm16, rate)
    if (tag, bits) == (_WAVE_FLOAT, 32):
        return Pcm(f32le_to_pcm16(samples), rate)
    raise AudioDecodeError(
        "unsupported_audio_format",
        f"WAV audio must be 16-bit PCM or 32-bit float (format {tag}, {bits} bits)",
    )
