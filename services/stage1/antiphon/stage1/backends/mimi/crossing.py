"""What crosses the pipe between a `mimi` stepper and one of its front ends
(`duplex_front_ends`), beside the shared memory (shared_rows.py) and the
notices both stages share (common/stepper/messages.py: Ready, Stepped,
Failed). Codes and audio go through memory; the pipe carries a session's
coming and going, and at most a wake or so per step. Typed values, their
fields only ever appended; a session is its front end's `token` for it.
"""

from __future__ import annotations

from dataclasses import dataclass

from antiphon.common.stepper.messages import Failed, Ready, Stepped


# ----------------------------------------------------- front end -> stepper
@dataclass(frozen=True)
class Hold:
    """Session `token` takes `row`, whose ring's write count was `mark`: its
    frames start there, and the row's decoder state starts afresh."""

    token: int
    row: int
    mark: int


@dataclass(frozen=True)
class Free:
    """The session's binding ended: its row is free."""

    token: int
    row: int


@dataclass(frozen=True)
class Wake:
    """A frame was written since this front end last heard of a step: the
    stepper's loop may be waiting for one."""


ToStepper = Hold | Free | Wake
ToFrontEnd = Ready | Stepped | Failed
