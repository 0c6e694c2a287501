"""Client events as the gateway's tests write them, and the translator's
answer to one: the command it makes, or the error it refuses with."""

from __future__ import annotations

import base64
import io
import json
import wave
from typing import Any

import numpy as np
import pytest
from openai._utils import maybe_transform
from openai.types.realtime import RealtimeClientEventParam, SessionUpdateEvent

from antiphon.common.audio import float32_to_pcm16
from antiphon.gateway.errors import ClientError
from antiphon.gateway.translate.translator import Translator
from antiphon.v1 import common_pb2 as cpb


def wav(pcm16: bytes, rate: int = 16000, *, channels: int = 1) -> bytes:
    """PCM16 in a WAV file, as the standard library writes one."""
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(pcm16)
    return buf.getvalue()


def b64(pcm: bytes) -> str:
    return base64.b64encode(pcm).decode("ascii")


def sine(rate: int, samples: int, freq: float = 440.0) -> bytes:
    t = np.arange(samples) / rate
    return float32_to_pcm16(0.5 * np.sin(2 * np.pi * freq * t))


def append(pcm: bytes, **extra: Any) -> dict[str, Any]:
    return {"type": "input_audio_buffer.append", "audio": b64(pcm), **extra}


def update(session: dict[str, Any]) -> dict[str, Any]:
    return {"type": "session.update", "session": session}


def patch(session: dict[str, Any]) -> cpb.SessionConfigPatch:
    """The configuration patch a fresh connection's `session.update` makes."""
    return Translator().translate(update(session)).update.config


def refused(event: dict[str, Any], translator: Translator | None = None) -> ClientError:
    """The error the translator refuses `event` with (it must refuse it)."""
    with pytest.raises(ClientError) as info:
        (translator or Translator()).translate(event)
    return info.value


def sdk_wire(event: RealtimeClientEventParam) -> dict[str, Any]:
    """The JSON the official `openai` SDK puts on the socket for a dict event.

    `RealtimeConnection.send` serialises dict events with exactly this
    `json.dumps(maybe_transform(event, RealtimeClientEventParam))`.
    """
    wire = json.loads(json.dumps(maybe_transform(event, RealtimeClientEventParam)))
    # Also a valid event by the SDK's own schema, so the shape is not our guess.
    SessionUpdateEvent.model_validate(wire)
    return wire
