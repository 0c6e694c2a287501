"""LiveKit Agents runs our GPT-Live route as its stock `GPTLiveModel` in an `AgentSession`.

`livekit.plugins.openai.realtime.GPTLiveModel(base_url=<gateway>/v1,
delegation=...)`, its settings otherwise stock, in an `AgentSession` with an
`Agent(instructions=...)`, no room: a live microphone (the question, 200 ms
every 200 ms, then live silence) and a speaker that keeps what the agent
plays (tests/clients/drive_livekit_live.py). The duplex model's stack
(`duplex_stack`: the Moshi architecture's tiny random configuration)
answers; the agent plays the model's own audio, and `AgentSession.aclose()`
ends the session with `session.closed`.

Both delegations: `client` (no tools), and `responses`, LiveKit's default,
whose tools go in `session.start` and, added later, in a `session.update`
(the Moshi architecture never delegates, so no tool runs).
"""

from __future__ import annotations

import base64
from typing import Any

import numpy as np
import pytest
from stack import LocalStack

from tests.clients.harness import Utterance, drive, no_errors, scenario_ok

pytestmark = [pytest.mark.stack, pytest.mark.models]

QUESTION = Utterance("Hello there, how are you doing today?", "espeak", frozenset())
DELTA_BYTES = 4800  # 100 ms of PCM16 at 24 kHz: the track's unit


@pytest.fixture(scope="module", params=["client", "responses"])
def record(
    request: pytest.FixtureRequest,
    duplex_stack: LocalStack,
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, Any]:
    delegation: str = request.param
    url = f"http://127.0.0.1:{duplex_stack.ports.gateway}/v1"
    tmp = tmp_path_factory.mktemp(f"lk-live-{delegation}")
    options = ["--delegation", delegation]
    out = drive("drive_livekit_live.py", url, QUESTION, None, tmp, options=options)
    out["delegation"] = delegation
    return out


def of(record: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [f for f in record["facts"]["frames"] if f["type"] == kind]


def test_the_agent_session_runs_with_no_error_anywhere(record: dict[str, Any]) -> None:
    """No error frame, error event, close error or error log; every step reached."""
    scenario_ok(record)
    no_errors(record)
    start = record["facts"]["sent"][0]
    assert start["type"] == "session.start", start
    assert start["session"]["delegation"]["type"] == record["delegation"]
    [started] = of(record, "session.started")
    assert started["session"]["delegation"]["type"] == record["delegation"]
    assert started["session"]["instructions"] == start["session"]["instructions"]


def test_responses_delegation_takes_the_tools_at_the_start_and_in_an_update(
    record: dict[str, Any],
) -> None:
    """Under `client` LiveKit sends no tools and no update: the start, then the close."""
    sent = record["facts"]["sent"]
    if record["delegation"] == "client":
        assert [e["type"] for e in sent] == ["session.start", "session.close"], sent
        assert "tools" not in sent[0]["session"]["delegation"]
        return
    start, update = sent[:2]
    tools = start["session"]["delegation"]["responses"]["tools"]
    assert [t["name"] for t in tools] == ["get_weather"]
    assert update["type"] == "session.update", update
    [updated] = of(record, "session.updated")
    assert updated["client_event_id"] == update["event_id"]
    responses = updated["session"]["delegation"]["responses"]
    assert [t["name"] for t in responses["tools"]] == ["get_weather", "get_time"]
    # LiveKit's backend model's name, kept from the start.
    assert responses["model"] == start["session"]["delegation"]["responses"]["model"]


def test_the_model_s_track_reaches_the_plugin_as_one_continuous_stream(
    record: dict[str, Any],
) -> None:
    """The output track, 100 ms deltas released as the input came (the
    plugin's 100 ms appends), as long as the audio LiveKit sent."""
    track = record["facts"]["track"]
    assert {len(base64.b64decode(d)) for _, d in track} == {DELTA_BYTES}
    appends = record["client_events"].count("session.input_audio.append")
    # Output is clocked by the input: all of it, less what was in flight at the close.
    assert appends - 3 <= len(track) <= appends, (len(track), appends)
    times = [t for t, _ in track]
    assert times[len(times) // 2] - times[0] > len(track) / 10 / 3


def test_the_agent_plays_the_model_s_own_audio(record: dict[str, Any]) -> None:
    """What LiveKit's adapter gated as speech reaches the session's audio output:
    24 kHz mono frames, not silence, each segment one gapless stretch of the
    model's track as the gateway sent it."""
    segments = record["facts"]["segments"]
    assert segments, "the agent played nothing"
    assert all([rate, ch] == [24000, 1] for s in segments for rate, ch, _ in s["frames"])
    pcm = [np.frombuffer(base64.b64decode(s["pcm"]), dtype="<i2") for s in segments]
    played = np.concatenate(pcm)
    assert len(played) >= 24000 * 0.3, f"{len(played) / 24000:.2f} s played"
    rms = float(np.sqrt(np.mean(np.square(played.astype(np.float64))))) / 32768
    assert rms > 0.002, rms  # above the plugin's own gate (0.0006 x 3)
    track = b"".join(base64.b64decode(d) for _, d in record["facts"]["track"])
    for s, audio in zip(segments, pcm, strict=True):
        assert track.find(audio.tobytes()) >= 0, f"segment at {s['first_s']} is not the track's"
    assert "speaking" in record["facts"]["agent_states"], record["facts"]["agent_states"]


def test_aclose_ends_the_session_with_session_closed(record: dict[str, Any]) -> None:
    assert record["facts"]["sent"][-1]["type"] == "session.close", record["facts"]["sent"]
    [closed] = of(record, "session.closed")
    assert closed["reason"] == "close_requested", closed
    assert closed["session"]["id"] == record["facts"]["session_id"]
    assert record["server_events"][-1] == "session.closed", record["server_events"][-3:]
