"""The credentials and limits of the authenticating test stack (`auth_stack`)."""

from __future__ import annotations

import json
from pathlib import Path

SINGLE_KEY = "sk-e2e-single"  # the `api_key` setting
ALPHA = "sk-e2e-alpha"  # minting and pinned config
BETA = "sk-e2e-beta"  # the opens-per-second bucket
GAMMA = "sk-e2e-gamma"  # concurrent sessions
DEMO_KEY = "sk-e2e-demo"
SIGNING_KEY = "e2e-signing-key"
KEYS_FILE = f"# the e2e keys\n{ALPHA}\n\n{BETA}\n{GAMMA}\n"
MAX_SESSIONS_PER_KEY = 2
# A bucket that refills about never during a run: a key opens at most this
# many sessions, whatever the speed of the machine.
OPENS_BURST = 5
OPENS_PER_S = 0.0001
SUBPROTOCOL = "openai-insecure-api-key."


def gateway_env(keys_file: Path, gateway_port: int) -> dict[str, str]:
    return {
        "ANTIPHON_API_KEY": SINGLE_KEY,
        "ANTIPHON_API_KEYS_FILE": str(keys_file),
        "ANTIPHON_CLIENT_SECRET_SIGNING_KEY": SIGNING_KEY,
        "ANTIPHON_KEY_MAX_SESSIONS": str(MAX_SESSIONS_PER_KEY),
        "ANTIPHON_KEY_OPENS_PER_S": str(OPENS_PER_S),
        "ANTIPHON_KEY_OPENS_BURST": str(OPENS_BURST),
        "ANTIPHON_DEMO_API_KEY": DEMO_KEY,
        "ANTIPHON_ALLOWED_ORIGINS": json.dumps(
            [f"http://127.0.0.1:{gateway_port}", f"http://localhost:{gateway_port}"]
        ),
    }


def browser_protocols(credential: str) -> list[str]:
    """What a browser offers: OpenAI's subprotocol pair."""
    return ["realtime", SUBPROTOCOL + credential]
