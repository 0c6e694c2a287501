"""Small helpers for building protobuf fixtures in tests."""

from __future__ import annotations

from typing import Any, TypeVar

from google.protobuf.message import Message

M = TypeVar("M", bound=Message)


def with_fields(msg: M, **fields: Any) -> M:
    """`msg` with `fields` set: messages copied in, lists replacing repeated fields."""
    for name, value in fields.items():
        if isinstance(value, Message):
            getattr(msg, name).CopyFrom(value)
        elif isinstance(value, list):
            del getattr(msg, name)[:]
            getattr(msg, name).extend(value)
        else:
            setattr(msg, name, value)
    return msg
