"""Third-party clients against the real-model stack: each library's own realtime object.

Each driver (`drive_<lib>.py`) runs in the clients venv (`make clients`:
`.venv-clients`, the libraries at the versions pinned in
`tests/clients/requirements.txt`), since their dependencies are not the
stack's. A test writes the spoken fixtures as WAV, runs the driver against
the session's `model_stack` (tests/clients/harness.py), and judges the JSON
record the driver writes.
"""

from __future__ import annotations

import pytest
from stack import LocalStack


@pytest.fixture(scope="module")
def gateway_url(model_stack: LocalStack) -> str:
    """The stack's OpenAI base URL for WebSockets, as a user configures a client."""
    return f"ws://127.0.0.1:{model_stack.ports.gateway}/v1"
