"""Client audio at the WebSocket edge: format fields, and decoding to PCM16.

The formats a session may use are `antiphon.common.audio_formats`'s; this
module reads how a client names them (the beta strings, the GA
`format` objects) and refuses the ones the table does not allow, before a
command exists. Base64 audio is decoded here, once, and every encoding a
client may send becomes PCM16:

- `pcm16`: little-endian signed 16-bit, passed through;
- `pcm_f32le`: little-endian float32, clipped to PCM16;
- `g711_ulaw` / `g711_alaw`: ITU-T G.711 at 8 kHz (`antiphon.common.g711`);
- `wav`: a RIFF/WAVE container (per event only) holding mono PCM16 or float32,
  whose header names the sample rate.

Output audio needs nothing here: the session encodes each delta in its
output format, and the delta names it.
"""

from __future__ import annotations

import base64
import binascii
import struct
from dataclasses import dataclass
from typing import Any

import numpy as np

from antiphon.common.audio import float32_to_pcm16
from antiphon.common.audio_formats import (
    G711,
    G711_ALAW,
    G711_RATE,
    G711_ULAW,
    INPUT_ENCODINGS,
    INPUT_RATES,
    PCM16,
    PCM_F32LE,
    PCM_INPUT_RATES,
    allowed_rates,
)
from antiphon.common.g711 import alaw_to_pcm16, ulaw_to_pcm16
from antiphon.gateway.errors import ClientError
from antiphon.gateway.translate import fields
from antiphon.v1 import common_pb2 as cpb

# A container an append may carry instead of raw samples; never a session's format.
WAV = "wav"

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


def ga_type(encoding: str) -> str:
    """The GA `format.type` of an encoding ("" is PCM16)."""
    return _GA_TYPES.get(encoding or PCM16, "audio/pcm")


def ga_format(fmt: cpb.AudioFormat) -> dict[str, Any]:
    """The GA `audio.*.format` object of a session format.

    OpenAI has no float32 type: `pcm_f32le` is `audio/pcm` plus an
    `encoding` key that stock clients ignore.
    """
    encoding = fmt.encoding or PCM16
    out: dict[str, Any] = {"type": ga_type(encoding)}
    if encoding not in G711:
        out["rate"] = fmt.sample_rate_hz
    if encoding == PCM_F32LE:
        out["encoding"] = PCM_F32LE
    return out


# ---------------------------------------------------------- format fields
def base64_audio(value: Any, param: str) -> bytes:
    if not isinstance(value, str):
        raise ClientError("invalid_value", f"`{param}` must be a base64 string", param=param)
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ClientError("invalid_audio", f"`{param}` is not valid base64", param=param) from exc


def decode_field(raw: bytes, encoding: str, param: str) -> Pcm:
    """`decode`, refusing the event (at `param`) when the audio cannot be decoded."""
    try:
        return decode(raw, encoding)
    except AudioDecodeError as exc:
        raise ClientError(exc.code, str(exc), param=param) from exc


def _encoding(name: Any, param: str, allowed: tuple[str, ...]) -> str:
    encoding = NAMES.get(fields.string(name, param))
    if encoding is None or encoding not in allowed:
        raise ClientError(
            "unsupported_audio_format", f"audio format {name!r} is not supported", param=param
        )
    return encoding


def _format_value(value: Any, param: str, allowed: tuple[str, ...]) -> tuple[str, int]:
    """Beta string (`"g711_ulaw"`) or GA object (`{"type": "audio/pcm", "rate": 24000}`):
    the encoding ("" when the object names no type) and the rate (0 when none)."""
    if isinstance(value, str):
        return _encoding(value, param, allowed), 0
    if not isinstance(value, dict):
        raise ClientError("invalid_value", f"`{param}` must be a string or object", param=param)
    encoding = _encoding(value["type"], param, allowed) if "type" in value else ""
    rate = value.get("rate")
    return encoding, 0 if rate is None else fields.positive_int(rate, f"{param}.rate")


def _check_rate(encoding: str, rate: int, param: str) -> None:
    """A declared rate must be one the (input) encoding can have."""
    if rate in allowed_rates(encoding, PCM_INPUT_RATES):
        return
    if encoding in G711:
        raise ClientError(
            "unsupported_audio_format",
            f"{encoding} audio is {G711_RATE} Hz, not {rate} Hz",
            param=param,
        )
    raise ClientError(
        "unsupported_audio_format",
        f"input sample rate {rate} Hz is not supported; use one of {PCM_INPUT_RATES}",
        param=param,
    )


def event_format(event: fields.Event, default: str) -> tuple[str, int]:
    """An append's own `format` (or `input_audio_format`) and `sample_rate_hz`:
    its encoding, and the rate it declares (0: none)."""
    key = "format" if "format" in event else "input_audio_format"
    encoding, rate = default, 0
    if event.get(key) is not None:
        allowed = (*INPUT_ENCODINGS, WAV)
        encoding, rate = _format_value(event[key], key, allowed)
        encoding = encoding or default
    if event.get("sample_rate_hz") is not None:
        given = fields.positive_int(event["sample_rate_hz"], "sample_rate_hz")
        if rate and given != rate:
            raise ClientError(
                "invalid_value",
                f"sample_rate_hz {given} disagrees with {key}.rate {rate}",
                param="sample_rate_hz",
            )
        rate, key = given, "sample_rate_hz"
    if rate and encoding != WAV:
        _check_rate(encoding, rate, "sample_rate_hz" if key == "sample_rate_hz" else f"{key}.rate")
    return encoding, rate


def session_format(
    value: Any,
    rate: Any,
    param: str,
    rate_param: str,
    allowed: tuple[str, ...],
    current: str | None,
) -> cpb.AudioFormat | None:
    """A session's input or output format; G.711 carries its 8 kHz explicitly.

    `current` is the encoding a rate alone is checked against (None: leave
    the check to the session, which knows the effective format).
    """
    if value is None and rate is None:
        return None
    fmt = cpb.AudioFormat()
    if value is not None:
        fmt.encoding, fmt.sample_rate_hz = _format_value(value, param, allowed)
    if rate is not None:
        fmt.sample_rate_hz = fields.positive_int(rate, rate_param)
    encoding = fmt.encoding or current
    if encoding in G711 and not fmt.sample_rate_hz:
        fmt.sample_rate_hz = G711_RATE
    # Output PCM rates are the session's to judge: it knows what the voice makes.
    checked = current is not None or encoding in G711
    if encoding is not None and checked and fmt.sample_rate_hz:
        _check_rate(encoding, fmt.sample_rate_hz, f"{param}.rate")
    return fmt


# ------------------------------------------------------------------ float32
def f32le_to_pcm16(data: bytes) -> bytes:
    if len(data) % 4:
        raise AudioDecodeError(
            "invalid_audio", "pcm_f32le audio must be a whole number of 4-byte samples"
        )
    return float32_to_pcm16(np.frombuffer(data, dtype="<f4"))


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
    if rate not in INPUT_RATES:
        raise AudioDecodeError(
            "unsupported_audio_format",
            f"WAV sample rate {rate} Hz is not supported; use one of {INPUT_RATES}",
        )
    if (tag, bits) == (_WAVE_PCM, 16):
        return Pcm(decode(samples, PCM16).pcm16, rate)
    if (tag, bits) == (_WAVE_FLOAT, 32):
        return Pcm(f32le_to_pcm16(samples), rate)
    raise AudioDecodeError(
        "unsupported_audio_format",
        f"WAV audio must be 16-bit PCM or 32-bit float (format {tag}, {bits} bits)",
    )
