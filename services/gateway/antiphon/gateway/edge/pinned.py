"""The session config a client secret's minter set: applied at open, then pinned.

A field the minter set is the session's from its open (`apply`), and a
client's `session.update` or `response.create` that sets it to another
value is refused with `session_config_pinned` naming the param (`check`).
Setting it to the value it already has is no change, so it passes: stock
clients resend their whole config. Fields the minter left out stay the
client's to set. (OpenAI lets a client override a secret's config; here a
browser holding a secret cannot raise what its backend chose.)
"""

from __future__ import annotations

from typing import Any

from google.protobuf.message import Message

from antiphon.common.audio_formats import PCM16
from antiphon.gateway.errors import ClientError
from antiphon.gateway.translate.session_patch import session_patch
from antiphon.v1 import common_pb2 as cpb

# Where a client sets each field, for the error's `param`.
_PARAMS = {
    "voice": "audio.output.voice",
    "input_audio_format": "audio.input.format",
    "output_audio_format": "audio.output.format",
    "turn_detection": "audio.input.turn_detection",
    "speed": "audio.output.speed",
    "native_duplex": "extra_body.native_duplex",
    "auto_response": "extra_body.auto_response",
    "return_stage_metrics": "extra_body.return_stage_metrics",
}


def _is_set(msg: Message, name: str) -> bool:
    """Whether a patch (or response request) sets `name`: its presence flag
    where it has one (a list or an object that may be set empty), else proto presence."""
    flag = f"has_{name}"
    if flag in msg.DESCRIPTOR.fields_by_name:
        return bool(getattr(msg, flag))
    field = msg.DESCRIPTOR.fields_by_name[name]
    if field.is_repeated:
        return len(getattr(msg, name)) > 0
    return msg.HasField(name)


def _value(msg: Message, name: str) -> Any:
    value = getattr(msg, name)
    field = msg.DESCRIPTOR.fields_by_name[name]
    return list(value) if field.is_repeated else value


class PinnedConfig:
    def __init__(self, patch: cpb.SessionConfigPatch) -> None:
        self._patch = patch
        self._names = [
            f.name
            for f in patch.DESCRIPTOR.fields
            if not f.name.startswith("has_") and _is_set(patch, f.name)
        ]

    @classmethod
    def from_session(cls, session: dict[str, Any]) -> PinnedConfig:
        """From a secret's `session` object (already judged valid when minted)."""
        return cls(session_patch({"session": session}, PCM16))

    @property
    def names(self) -> list[str]:
        return list(self._names)

    def apply(self, patch: cpb.SessionConfigPatch) -> cpb.SessionConfigPatch:
        """`patch` with every pinned field set to the minter's value."""
        for name in self._names:
            patch.ClearField(name)
            field = patch.DESCRIPTOR.fields_by_name[name]
            value = getattr(self._patch, name)
            if field.is_repeated:
                getattr(patch, name).extend(value)
            elif field.message_type is not None:
                getattr(patch, name).CopyFrom(value)
            else:
                setattr(patch, name, value)
            flag = f"has_{name}"
            if flag in patch.DESCRIPTOR.fields_by_name:
                setattr(patch, flag, True)
        return patch

    def check(self, msg: Message, where: str) -> None:
        """Refuse `msg` (a SessionConfigPatch, or a CreateResponse's overrides,
        `where` = "session" / "response") if it changes a pinned field."""
        fields = msg.DESCRIPTOR.fields_by_name
        for name in self._names:
            if name not in fields or not _is_set(msg, name):
                continue
            if _value(msg, name) != _value(self._patch, name):
                param = f"{where}.{_PARAMS.get(name, name)}"
                raise ClientError(
                    "session_config_pinned",
                    f"{param} was set by the client secret this session was opened with "
                    "and cannot be changed",
                    param=param,
                )
