"""The OpenAI Agents SDK for JavaScript (`@openai/agents-realtime`, its own
browser bundle from npm, unmodified) in headless Chromium with a fake
microphone: its WebRTC transport, pointed at the gateway's
`/v1/realtime/calls` (the base URL is the one change), with a client secret
minted by the gateway, holds a spoken turn. The page is served from another
origin than the gateway's, as an app's own page would be (CORS)."""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from stack import LocalStack

from tests.deploy.tools import agents_realtime_bundle
from tests.e2e.test_browser import QUESTION, TURN_TIMEOUT_S, chromium, fake_microphone, words

pytestmark = [pytest.mark.stack, pytest.mark.models, pytest.mark.npm]

PAGE = """<!doctype html>
<meta charset="utf-8">
<title>Agents SDK on Antiphon</title>
<script type="module">
import { OpenAIRealtimeWebRTC, RealtimeAgent, RealtimeSession }
  from "./bundle/openai-realtime-agents.mjs";
const log = window.agentLog = { state: "loaded", history: [], events: [], errors: [] };
window.startAgent = async (key, callsUrl) => {
  log.state = "connecting";
  try {
    const instructions = "Answer in one short sentence.";
    const agent = new RealtimeAgent({ name: "Assistant", instructions });
    const transport = new OpenAIRealtimeWebRTC({ baseUrl: callsUrl });
    const session = window.agentSession = new RealtimeSession(agent, { transport });
    session.on("transport_event", (e) => log.events.push(e.type));
    session.on("history_updated", (history) => {
      log.history = history.filter((i) => i.type === "message").map((i) => ({
        role: i.role,
        text: (i.content || []).map((c) => c.transcript || c.text || "").join(" "),
      }));
    });
    session.on("error", (e) => {
      log.errors.push(String((e.error && e.error.message) || e.error || e));
    });
    await session.connect({ apiKey: key });
    log.state = "connected";
  } catch (err) {
    log.errors.push(String((err && err.message) || err));
    log.state = "failed";
  }
};
window.remoteAudioEnergy = async () => {
  const pc = window.agentSession.transport.connectionState.peerConnection;
  let energy = 0;
  (await pc.getStats()).forEach((r) => {
    if (r.type === "inbound-rtp" && r.kind === "audio") energy += r.totalAudioEnergy || 0;
  });
  return energy;
};
</script>
"""


class _Quiet(SimpleHTTPRequestHandler):
    extensions_map = {**SimpleHTTPRequestHandler.extensions_map, ".mjs": "text/javascript"}

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextmanager
def app_origin(root: Path) -> Iterator[str]:
    """`root` served on a port of its own: another origin than the gateway's."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_the_agents_sdk_for_javascript_holds_a_spoken_turn_over_webrtc(
    model_stack: LocalStack, tmp_path: Path
) -> None:
    gateway = f"http://127.0.0.1:{model_stack.ports.gateway}"
    secret = httpx.post(f"{gateway}/v1/realtime/client_secrets", json={}).json()["value"]
    assert secret.startswith("ek_")  # what the SDK asks of a browser's key
    site = tmp_path / "site"
    site.mkdir()
    (site / "index.html").write_text(PAGE)
    (site / "bundle").symlink_to(agents_realtime_bundle(), target_is_directory=True)
    mic = fake_microphone(tmp_path / "mic.wav", "piper", [(2500, QUESTION)])
    with app_origin(site) as origin, chromium(mic, tmp_path / "profile") as driver:
        driver.get(f"{origin}/index.html")
        _until(driver, "the SDK to load", "return window.agentLog && window.agentLog.state", 30)
        driver.execute_script(
            "window.startAgent(arguments[0], arguments[1])", secret, f"{gateway}/v1/realtime/calls"
        )
        _until(driver, "the session", "return window.agentLog.state !== 'connecting'", 30)

        def turn(log: dict[str, Any]) -> bool:
            said = [m for m in log["history"] if m["role"] == "assistant" and m["text"].strip()]
            return bool(said) and "response.done" in log["events"]

        log = _wait_log(driver, turn)
        energy = driver.execute_async_script(
            "const done = arguments[arguments.length - 1]; window.remoteAudioEnergy().then(done);"
        )
    assert log["state"] == "connected" and not log["errors"], log
    heard = [m["text"] for m in log["history"] if m["role"] == "user"]
    assert heard and {"capital", "japan"} <= words(heard[0]), log["history"]
    assert "output_audio_buffer.started" in log["events"], log["events"]
    assert energy > 0, log


def _until(driver: Any, what: str, script: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not driver.execute_script(script):
        if time.monotonic() > deadline:
            raise AssertionError(
                f"timed out waiting for {what}: {driver.execute_script('return window.agentLog')}"
            )
        time.sleep(0.25)


def _wait_log(driver: Any, done: Any) -> dict[str, Any]:
    deadline = time.monotonic() + TURN_TIMEOUT_S * 2
    while True:
        log: dict[str, Any] = driver.execute_script("return window.agentLog")
        if done(log) or log["state"] == "failed":
            return log
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for the spoken turn: {log}")
        time.sleep(0.5)
