"""What crosses the pipe between a duplex stepper and one of its front ends
(`duplex_front_ends`), beside the shared memory (shared_rows.py).

Audio and each step's output go through shared memory; the pipe carries the
rest, rarely and small: the requests other than audio, a notice per step,
and the events that do not fit a step's slot or come outside a step. Typed
values, their fields only ever appended, so that a front end and a stepper
of one release always agree; a session is its front end's `token` for it.
"""

from __future__ import annotations

from dataclasses import dataclass

from antiphon.common.stepper.messages import Failed, Ready, Stepped


# ----------------------------------------------------- front end -> stepper
@dataclass(frozen=True)
class Request:
    """A session's request other than its audio (a serialized Stage0Request),
    on `row`, sent when the row's audio write count was `mark`: what it does
    to the row's audio (a commit counts it, a clear drops it) stops there."""

    token: int
    row: int
    mark: int
    request: bytes


@dataclass(frozen=True)
class Release:
    """The session's binding ended: its row is free."""

    token: int


# ----------------------------------------------------- stepper -> front end
# (beside common/stepper/messages.py: Ready, Stepped, Failed)
@dataclass(frozen=True)
class Events:
    """Serialized Stage0Events for session `token`, in order: the answer to a
    request, or a step's that did not fit its slot (sent before its notice)."""

    token: int
    events: list[bytes]


ToStepper = Request | Release
ToFrontEnd = Ready | Stepped | Events | Failed
__all__ = ["Events", "Failed", "Ready", "Release", "Request", "Stepped", "ToFrontEnd", "ToStepper"]
