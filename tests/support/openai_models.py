"""The `openai` SDK's server event models as a strict judge of a wire frame.

`violations(frame)` is what a strict client would object to in one frame of
OpenAI's dialect: the SDK's `RealtimeServerEvent` union and the model of the
frame's own type, both in strict mode (no coercion), and every field the
SDK's models do not declare (the SDK's models allow extra keys; OpenAI's
dialect sends none but those OpenAI itself sends undeclared, `OPENAI_SENDS`).
"""

from __future__ import annotations

import typing
from typing import Any

from openai.types.realtime import RealtimeClientEvent, RealtimeServerEvent
from pydantic import BaseModel, TypeAdapter, ValidationError

Frame = dict[str, Any]

# Fields OpenAI sends that the SDK's models leave undeclared: the session
# object of `session.created` / `.updated` is typed as a session *request*,
# which has no `id` or `object`.
OPENAI_SENDS = {
    ("session.created", "session.id"),
    ("session.created", "session.object"),
    ("session.updated", "session.id"),
    ("session.updated", "session.object"),
}

_SERVER_EVENT: TypeAdapter[Any] = TypeAdapter(RealtimeServerEvent)


def models_of(union: Any) -> dict[str, type[BaseModel]]:
    """Wire type -> the SDK model of that type, from an event union."""
    models: dict[str, type[BaseModel]] = {}
    for model in typing.get_args(typing.get_args(union)[0]):
        (literal,) = typing.get_args(model.model_fields["type"].annotation)
        models[literal] = model
    return models


SERVER_MODELS = models_of(RealtimeServerEvent)
CLIENT_TYPES = frozenset(models_of(RealtimeClientEvent))


def violations(frame: Frame) -> list[str]:
    """Everything a strict `openai` SDK client refuses in `frame`; [] when none."""
    # The union is what the Agents SDK and the `openai` SDK's own parsing go through.
    return judged(frame, SERVER_MODELS, _SERVER_EVENT, "OpenAI", "RealtimeServerEvent")


def judged(
    frame: Frame,
    models: dict[str, type[BaseModel]],
    union: TypeAdapter[Any],
    protocol: str,
    union_name: str,
) -> list[str]:
    """What a strict client refuses in `frame`: the model of its type and
    the event `union`, strictly; every key no model declares."""
    model = models.get(frame.get("type", ""))
    if model is None:
        return [f"{frame.get('type')!r} is not an {protocol} server event type"]
    try:
        parsed = model.model_validate(frame, strict=True)
    except ValidationError as exc:
        return [f"{model.__name__}: {describe(err)}" for err in exc.errors()]
    problems = [
        f"undeclared field {path}"
        for path in extras(parsed)
        if (frame["type"], path) not in OPENAI_SENDS
    ]
    try:
        union.validate_python(frame, strict=True)
    except ValidationError:
        problems.append(f"the SDK's {union_name} union refuses it")
    return problems


def describe(err: Any) -> str:
    loc = ".".join(str(part) for part in err["loc"])
    return f"{loc}: {err['msg']} (got {err.get('input')!r})"


def extras(value: Any, path: str = "") -> list[str]:
    """Paths of the keys no model in `value` declares."""
    found: list[str] = []
    if isinstance(value, BaseModel):
        for key in value.__pydantic_extra__ or {}:
            found.append(f"{path}{key}")
        for name in type(value).model_fields:
            found += extras(getattr(value, name), f"{path}{name}.")
    elif isinstance(value, list):
        for i, entry in enumerate(value):
            found += extras(entry, f"{path.rstrip('.')}[{i}].")
    return found
