"""The `openai` SDK's GPT-Live server event models as a strict judge of a wire frame.

`violations(frame)` is what a strict GPT-Live client objects to in one
frame: the model of the frame's own type and the SDK's `ServerEvent`
union, both in strict mode (no coercion), and every key no model declares.
"""

from __future__ import annotations

from typing import Any

from openai.types.live import ServerEvent
from pydantic import TypeAdapter, ValidationError

from tests.support.openai_models import describe, extras, models_of

Frame = dict[str, Any]

SERVER_MODELS = models_of(ServerEvent)
_SERVER_EVENT: TypeAdapter[Any] = TypeAdapter(ServerEvent)


def violations(frame: Frame) -> list[str]:
    """Everything a strict GPT-Live client refuses in `frame`; [] when none."""
    model = SERVER_MODELS.get(frame.get("type", ""))
    if model is None:
        return [f"{frame.get('type')!r} is not a GPT-Live server event type"]
    try:
        parsed = model.model_validate(frame, strict=True)
    except ValidationError as exc:
        return [f"{model.__name__}: {describe(err)}" for err in exc.errors()]
    problems = [f"undeclared field {path}" for path in extras(parsed)]
    try:
        _SERVER_EVENT.validate_python(frame, strict=True)
    except ValidationError:
        problems.append("the SDK's live ServerEvent union refuses it")
    return problems
