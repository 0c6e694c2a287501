"""The `openai` SDK's GPT-Live server event models as a strict judge of a wire frame.

`violations(frame)` is what a strict GPT-Live client objects to in one
frame: the model of the frame's own type and the SDK's `ServerEvent`
union, both in strict mode (no coercion), and every key no model declares.
"""

from __future__ import annotations

from typing import Any

from openai.types.live import ServerEvent
from pydantic import TypeAdapter

from tests.support.openai_models import judged, models_of

Frame = dict[str, Any]

SERVER_MODELS = models_of(ServerEvent)
_SERVER_EVENT: TypeAdapter[Any] = TypeAdapter(ServerEvent)


def violations(frame: Frame) -> list[str]:
    """Everything a strict GPT-Live client refuses in `frame`; [] when none."""
    return judged(frame, SERVER_MODELS, _SERVER_EVENT, "GPT-Live", "live ServerEvent")
