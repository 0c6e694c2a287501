"""What a stepper tells each of its front ends by their pipe, in either
stage (`duplex_front_ends`): beside these, each stage's own requests and
answers (stage0/backends/moshi/crossing.py, stage1/backends/mimi/crossing.py).
Typed values, their fields only ever appended, so that a front end and a
stepper of one release always agree."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Ready:
    """The model is loaded and steps: the front end may take sessions."""


@dataclass(frozen=True)
class Stepped:
    """Step `step`'s output is in the slots (common/stepper/slot_ring.py)."""

    step: int


@dataclass(frozen=True)
class Failed:
    """The model failed a step; the stepper stops."""

    message: str
