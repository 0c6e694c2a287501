"""The WebRTC edge is a setting (`webrtc_calls`): on, the call routes exist;
off, they do not and aiortc is never imported (a gateway for sockets only,
as the GPU bench runs it without aiortc's wheels)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

_PROBE = """
import json, sys
from antiphon.gateway.app import create_app
from antiphon.gateway.settings import GatewaySettings
app = create_app(GatewaySettings(webrtc_calls=sys.argv[1] == "on"))
paths = [getattr(r, "path", "") for r in app.routes]
print(json.dumps({"aiortc": "aiortc" in sys.modules, "calls": "/v1/realtime/calls" in paths}))
"""


@pytest.mark.parametrize(("edge", "loaded"), [("on", True), ("off", False)])
def test_the_call_routes_and_aiortc_come_with_the_setting(edge: str, loaded: bool) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE, edge],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {"aiortc": loaded, "calls": loaded}
