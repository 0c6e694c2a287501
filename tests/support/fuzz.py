"""Hypothesis strategies for hostile client events, shared by the fuzz tests.

Events the way a hostile or broken client sends them: every type the
translator knows (aliases and native names included), unknown and
non-string types, and for each the fields its builder reads, filled with
random JSON (wrong types, NaN and huge numbers, lone surrogates, deep
nesting, long strings, bad base64) or with a well-formed value.
"""

from __future__ import annotations

import base64
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from antiphon.gateway.dialects import native
from antiphon.gateway.translate.translator import ALIASES, HANDLERS
from tests.support import tiers

# OpenAI's error types (its `error.type`); a refusal of a client event is the client's.
ERROR_TYPES = {"invalid_request_error", "server_error", "rate_limit_error"}
KNOWN_TYPES = sorted({*HANDLERS, *ALIASES, *native.INPUT_NAMES, "session.resume"})
# Every field name some builder, session patch or item reader looks at.
FIELDS = [
    "audio", "chunk", "format", "sample_rate_hz", "is_speech", "session", "item", "response",
    "item_id", "previous_item_id", "content_index", "audio_end_ms", "response_id", "played_ms",
    "committed_ms", "truncate", "event", "payload", "source", "server_event_seq", "text",
    "session_id", "resume_token", "incarnation", "last_received_server_event_seq",
]  # fmt: skip
SESSION_FIELDS = [
    "type", "model", "instructions", "voice", "modalities", "output_modalities", "audio",
    "input_audio_format", "output_audio_format", "turn_detection", "tools", "tool_choice",
    "temperature", "max_response_output_tokens", "max_output_tokens", "truncation",
    "input_audio_transcription", "sample_rate_hz", "overlap_policy", "extra_body", "include",
]  # fmt: skip
RESPONSE_FIELDS = [
    "instructions", "output_modalities", "modalities", "temperature", "max_output_tokens",
    "tools", "tool_choice", "metadata", "conversation", "input",
]  # fmt: skip
ITEM_FIELDS = ["type", "role", "content", "id", "call_id", "name", "arguments", "output"]

# Strings as they arrive from json.loads: any code point, lone surrogates included
# (`"\ud800"` is valid JSON), plus the names and values the readers compare against.
ODD_TEXT = st.text(st.characters(codec=None), max_size=40) | st.sampled_from(
    [
        "", " ", "\x00", "\ud800", "realtime", "pcm16", "audio/pcm", "audio/pcmu", "g711_ulaw",
        "server_vad", "semantic_vad", "message", "user", "assistant", "input_text",
        "input_audio", "function_call", "function_call_output", "text", "auto", "none",
        "barge_in", "item_1", "resp_1", "sess_0123456789abcdef", "0" * 5000,
    ]
)  # fmt: skip
NUMBERS = st.sampled_from([0, -1, 1, 2**31, 2**63, -(2**63) - 1, 10**400]) | st.floats()
SCALARS = st.none() | st.booleans() | NUMBERS | st.integers() | ODD_TEXT
JUNK = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(ODD_TEXT, inner, max_size=4),
    max_leaves=12,
)


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


AUDIO = (
    st.binary(max_size=64).map(_b64)
    | st.binary(max_size=64).map(lambda b: _b64(b).rstrip("="))
    | st.just("not base64!")
    | st.just(_b64(b"RIFF" + b"\x00" * 40))  # a WAV header that lies
)


def _object(keys: list[str], values: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    return st.dictionaries(st.sampled_from(keys) | ODD_TEXT, values, max_size=6)


# Nested objects shaped like the real ones, with hostile leaves and subtrees.
NESTED = st.deferred(
    lambda: _object(SESSION_FIELDS + ITEM_FIELDS + ["input", "output"], VALUES) | JUNK
)
VALUES: st.SearchStrategy[Any] = JUNK | AUDIO | NESTED | st.lists(NESTED, max_size=3)
FIELD_VALUES = {
    "audio": AUDIO | JUNK,
    "chunk": AUDIO | JUNK,
    "session": _object(SESSION_FIELDS, VALUES) | JUNK,
    "response": _object(RESPONSE_FIELDS, VALUES) | JUNK,
    "item": _object(ITEM_FIELDS, VALUES) | JUNK,
}


@st.composite
def client_events(draw: st.DrawFn) -> Any:
    """A client event: usually an object with a known type and its fields, sometimes not."""
    kind = draw(st.integers(0, 19))
    if kind == 0:
        return draw(JUNK)  # not an object at all, or no usable type
    etype: Any = draw(st.sampled_from(KNOWN_TYPES))
    if kind == 1:
        etype = draw(JUNK)
    event: dict[str, Any] = {"type": etype}
    for name in draw(st.lists(st.sampled_from(FIELDS), max_size=6, unique=True)):
        event[name] = draw(FIELD_VALUES.get(name, VALUES))
    if draw(st.booleans()):
        event["event_id"] = draw(SCALARS)
    if draw(st.integers(0, 3)) == 0:
        event["operation_id"] = draw(SCALARS)
    return event


def examples(n: int) -> int:
    """How many examples a fuzz test of `n` runs in the tier being run: a fifth
    in the fast one (it loads its hypothesis profile before collection), which
    keeps `make test-fast` under a minute; `make test` runs them all."""
    return max(50, n // 5) if settings.get_current_profile_name() == tiers.FAST_PROFILE else n


# Reproducible and bounded: CI runs the same events every time, without a deadline
# (a loaded machine is not a failure) and without an example database on disk.
FUZZ = settings(
    max_examples=examples(1500),
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
