"""A client secret's session config is the session's at its open, and no
client event can change what the minter set."""

from __future__ import annotations

from typing import Any

import pytest

from antiphon.common.audio_formats import G711_ULAW
from antiphon.gateway.edge.pinned import PinnedConfig
from antiphon.gateway.errors import ClientError
from antiphon.gateway.translate.translator import Translator

MINTED: dict[str, Any] = {
    "type": "realtime",
    "instructions": "Only talk about trains.",
    "audio": {"output": {"voice": "alloy"}, "input": {"turn_detection": None}},
    "output_modalities": ["audio"],
    "tools": [{"type": "function", "name": "timetable", "parameters": {"type": "object"}}],
}


def _translator() -> Translator:
    return Translator(pinned=PinnedConfig.from_session(MINTED))


def test_openais_open_on_connect_carries_the_minters_config() -> None:
    cmd = _translator().connect({"model": "whatever"})
    patch = cmd.open.config
    assert patch.instructions == "Only talk about trains."
    assert patch.voice == "alloy"
    assert patch.has_turn_detection and patch.has_output_modalities
    assert list(patch.output_modalities) == ["audio"]
    assert [t.name for t in patch.tools] == ["timetable"] and patch.has_tools
    assert patch.model == "whatever"  # not pinned: the URL's


def test_the_url_query_cannot_change_a_pinned_field() -> None:
    pinned = PinnedConfig.from_session({"model": "antiphon-cascade"})
    cmd = Translator(pinned=pinned).connect({"model": "other"})
    assert cmd.open.config.model == "antiphon-cascade"


@pytest.mark.parametrize(
    ("session", "param"),
    [
        ({"instructions": "Talk about anything."}, "session.instructions"),
        ({"audio": {"output": {"voice": "echo"}}}, "session.audio.output.voice"),
        ({"voice": "echo"}, "session.audio.output.voice"),
        ({"output_modalities": ["text"]}, "session.output_modalities"),
        (
            {"audio": {"input": {"turn_detection": {"type": "server_vad"}}}},
            "session.audio.input.turn_detection",
        ),
        ({"tools": []}, "session.tools"),
    ],
)
def test_a_session_update_changing_a_pinned_field_is_refused_naming_it(
    session: dict[str, Any], param: str
) -> None:
    with pytest.raises(ClientError) as refused:
        _translator().translate({"type": "session.update", "session": session})
    assert (refused.value.code, refused.value.param) == ("session_config_pinned", param)


def test_resending_the_pinned_values_and_setting_others_passes() -> None:
    t = _translator()
    cmd = t.translate(
        {
            "type": "session.update",
            "session": {
                **MINTED,
                "temperature": 0.7,
                "audio": {
                    "output": {"voice": "alloy", "speed": 1.2},
                    "input": {"turn_detection": None},
                },
            },
        }
    )
    assert cmd.update.config.voice == "alloy"
    assert cmd.update.config.HasField("temperature")


def test_a_refused_update_changes_nothing_the_translator_remembers() -> None:
    pinned = PinnedConfig.from_session({"audio": {"input": {"format": {"type": "audio/pcmu"}}}})
    t = Translator(pinned=pinned)
    t.connect({})
    with pytest.raises(ClientError):
        t.translate(
            {
                "type": "session.update",
                "session": {"audio": {"input": {"format": {"type": "audio/pcm", "rate": 24000}}}},
            }
        )
    # An append naming no format is still read as the pinned encoding.
    assert t._input_encoding == G711_ULAW


@pytest.mark.parametrize(
    ("response", "param"),
    [
        ({"instructions": "Forget the trains."}, "response.instructions"),
        ({"output_modalities": ["text"]}, "response.output_modalities"),
        ({"tools": []}, "response.tools"),
    ],
)
def test_a_response_cannot_override_a_pinned_field(response: dict[str, Any], param: str) -> None:
    with pytest.raises(ClientError) as refused:
        _translator().translate({"type": "response.create", "response": response})
    assert (refused.value.code, refused.value.param) == ("session_config_pinned", param)
    # What the minter did not set stays the client's.
    _translator().translate({"type": "response.create", "response": {"temperature": 0.6}})


def test_the_duplex_open_takes_the_clients_fields_under_the_pinned_ones() -> None:
    cmd = _translator().open(
        {"type": "session.update", "session": {"temperature": 0.8, "voice": "alloy"}}, {}
    )
    patch = cmd.open.config
    assert patch.instructions == "Only talk about trains." and patch.HasField("temperature")
    with pytest.raises(ClientError, match="client secret"):
        _translator().open({"type": "session.update", "session": {"voice": "echo"}}, {})


def test_without_a_secret_nothing_is_pinned() -> None:
    Translator().translate({"type": "session.update", "session": {"voice": "echo"}})
    assert PinnedConfig.from_session({}).names == []
