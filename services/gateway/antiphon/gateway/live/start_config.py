"""GPT-Live's `session.start` configuration, strictly: the session's opening patch.

OpenAI's config is strict: a field it does not define is an `error`
(`unknown_parameter`, naming it), and nothing but `delegation` changes after
the start. What this server does with each field:

- `model` (required): any name; echoed. The deployment serves the duplex
  model it runs; a backend that is no model-native duplex model refuses it
  at the start (`invalid_model`, `live.outbound`).
- `instructions`: the session's instructions (on PersonaPlex, its text
  prompt, read when the session takes its row).
- `audio.format`: both directions' format: `audio/pcm` at 16000 or 24000 Hz,
  or G.711 (`audio/pcmu`, `audio/pcma`) at 8000 Hz. Input is declared to the
  session as it is; output is asked of the session as PCM16 at 24 kHz and
  converted as one track (`track_format`).
- `audio.output.voice`: a voice name, as a Realtime session's `voice`.
- `safety_identifier`: taken and not used (no safety monitoring here).
- `store`: false only (no recordings, no forks).
- `delegation`: the application's (null, `client`) or a Responses model's
  (`live.delegation`).
- `input` (text history), `triggers` and `client` are not served: a
  non-empty one is refused with `unsupported_capability`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from antiphon.common.audio_formats import G711, G711_RATE, PCM16, PCM_INPUT_RATES
from antiphon.gateway.errors import ClientError
from antiphon.gateway.live import delegation
from antiphon.gateway.live.delegation import Delegation
from antiphon.gateway.live.track_format import TRACK_RATE
from antiphon.gateway.translate import fields
from antiphon.gateway.translate.audio_formats import NAMES, ga_type
from antiphon.v1 import common_pb2 as cpb

Json = dict[str, Any]

# OpenAI's default format.
DEFAULT_FORMAT = cpb.AudioFormat(encoding=PCM16, sample_rate_hz=TRACK_RATE)
_SESSION_KEYS = frozenset(
    {
        "model",
        "instructions",
        "audio",
        "input",
        "delegation",
        "safety_identifier",
        "store",
        "triggers",
        "client",
    }
)
_NOT_SERVED = {
    "input": "text history before the start (the duplex model's context is its own audio)",
    "triggers": "Decisions triggers: not served",
    "client": "a WebRTC frontend's permissions: this is a WebSocket",
}


@dataclass(frozen=True)
class StartConfig:
    """What the client asked for, as the session's opening patch."""

    patch: cpb.SessionConfigPatch
    # Both directions' format (GPT-Live has one).
    audio_format: cpb.AudioFormat
    safety_identifier: str | None
    delegation: Delegation | None


def start_config(event: Json) -> StartConfig:
    """The `session` of a `session.start`; raises ClientError."""
    s = fields.obj(fields.required(event, "session"), "session")
    fields.known_keys(s, _SESSION_KEYS, "session.")
    for key, what in _NOT_SERVED.items():
        if s.get(key):  # null, [] and {} ask for nothing
            raise ClientError(
                "unsupported_capability", f"`session.{key}` is not served: {what}", param=key
            )
    if s.get("store") not in (None, False):
        raise ClientError(
            "unsupported_capability",
            "`session.store` must be false: sessions are not stored",
            param="session.store",
        )
    patch = cpb.SessionConfigPatch(
        model=fields.non_empty_string(fields.required(s, "model", "session.model"), "session.model")
    )
    if s.get("instructions") is not None:
        patch.instructions = fields.string(s["instructions"], "session.instructions")
    audio = fields.obj(s.get("audio"), "session.audio")
    fields.known_keys(audio, frozenset({"format", "output"}), "session.audio.")
    fmt = audio_format(audio.get("format"))
    # The session hears the client's format and speaks the track's.
    patch.input_audio_format.CopyFrom(fmt)
    patch.output_audio_format.CopyFrom(DEFAULT_FORMAT)
    output = fields.obj(audio.get("output"), "session.audio.output")
    fields.known_keys(output, frozenset({"voice"}), "session.audio.output.")
    voice = output.get("voice")
    if isinstance(voice, dict):
        raise ClientError(
            "unsupported_capability",
            "custom voices are not served; name a voice",
            param="session.audio.output.voice",
        )
    if voice is not None:
        patch.voice = fields.string(voice, "session.audio.output.voice")
    safety = s.get("safety_identifier")
    if safety is not None:
        safety = fields.string(safety, "session.safety_identifier")
    return StartConfig(patch, fmt, safety, delegation.at_start(s.get("delegation")))


def audio_format(value: Any) -> cpb.AudioFormat:
    """`{type: audio/pcm, rate: 16000|24000}` or G.711 `{type, rate: 8000}`."""
    if value is None:
        return DEFAULT_FORMAT
    param = "session.audio.format"
    fmt = fields.obj(value, param)
    fields.known_keys(fmt, frozenset({"type", "rate"}), f"{param}.")
    name = fields.string(fields.required(fmt, "type", f"{param}.type"), f"{param}.type")
    encoding = NAMES.get(name)
    # GPT-Live names its formats by their GA types only (no "pcm16", no WAV).
    if encoding is None or ga_type(encoding) != name:
        raise ClientError(
            "invalid_value",
            f"Invalid value: '{name}'. Supported values are: 'audio/pcm', 'audio/pcmu', "
            "'audio/pcma'.",
            param=f"{param}.type",
        )
    rates = (G711_RATE,) if encoding in G711 else PCM_INPUT_RATES
    rate = fmt.get("rate", rates[-1])
    if not (isinstance(rate, int) and not isinstance(rate, bool) and rate in rates):
        raise ClientError(
            "invalid_value",
            f"{name} audio is at {' or '.join(map(str, rates))} Hz, not {rate!r}",
            param=f"{param}.rate",
        )
    return cpb.AudioFormat(encoding=encoding, sample_rate_hz=int(rate))


def format_json(fmt: cpb.AudioFormat) -> Json:
    """The resolved `audio.format` as GPT-Live writes it."""
    return {"type": ga_type(fmt.encoding), "rate": fmt.sample_rate_hz}
