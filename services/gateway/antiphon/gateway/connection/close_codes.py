"""The WebSocket close codes the gateway sends, each chosen on purpose (RFC 6455, 7.4.1).

What a client's own close code means for its session is `client_close`'s.
"""

from __future__ import annotations

CLOSE_NORMAL = 1000
# The client broke a rule of ours: refused at the edge, silent past its
# first-event window, or too slow a reader for its session.
CLOSE_POLICY = 1008
# The gateway cannot go on (no session replica answered in time).
CLOSE_INTERNAL = 1011
# Service restart: this gateway is going away, the client should come back
# (through another one). The session only detaches (`client_close`).
CLOSE_SERVICE_RESTART = 1012
