"""The demo page behind an authenticating gateway: it fetches a client secret
from `GET /demo/session` and opens its session with it, as OpenAI's browser
clients do (the `openai-insecure-api-key.` subprotocol). Headless Chromium,
a silent fake microphone, the synthetic stages: no model loads here. Over
the WebSocket and over a WebRTC call (the secret as the offer's bearer)."""

from __future__ import annotations

import wave
from pathlib import Path

import pytest
from stack import LocalStack

from tests.e2e.test_browser import MIC_RATE, chromium, page_state, start, stop
from tests.support.speech import silence

pytestmark = pytest.mark.stack


@pytest.mark.parametrize("transport", ["websocket", "webrtc"])
def test_the_page_opens_its_session_with_a_secret_from_the_server(
    auth_stack: LocalStack, tmp_path: Path, transport: str
) -> None:
    mic = tmp_path / "mic.wav"
    with wave.open(str(mic), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(MIC_RATE)
        w.writeframes(silence(5000, MIC_RATE))
    with chromium(mic, tmp_path / "profile") as driver:
        opened = start(driver, auth_stack.ports.gateway, native=False, transport=transport)
        assert opened["stats"]["sessionId"], opened["stats"]
        assert page_state(driver)["errors"] == []
        # The stack refuses a socket or a call without a credential
        # (test_client_secrets, test_webrtc_calls), so the page's own secret
        # opened this one: as the subprotocol, or as a call's bearer.
        stop(driver)
