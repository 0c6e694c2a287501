"""Redis key layout. One owner of every key name.

Per-session keys carry the hash tag `{<session_id>}` so that all of one
session's keys land in one Redis Cluster slot and multi-key Lua scripts
stay legal there.
"""

from __future__ import annotations

ADMITTED = "ap:admitted"

# Every per-session key of every session, as a SCAN MATCH pattern (Redis
# patterns take braces literally): what is left of sessions, for tests and
# operators.
EVERY_SESSION_KEY = "ap:{*}:*"


def session(session_id: str) -> str:
    return f"ap:{{{session_id}}}:session"


def owner(session_id: str) -> str:
    return f"ap:{{{session_id}}}:owner"


def journal(session_id: str) -> str:
    return f"ap:{{{session_id}}}:journal"


def history(session_id: str) -> str:
    return f"ap:{{{session_id}}}:history"


def ops(session_id: str) -> str:
    """Completed append operation ids (idempotency), scored by arrival."""
    return f"ap:{{{session_id}}}:ops"


def all_for(session_id: str) -> list[str]:
    return [
        session(session_id),
        owner(session_id),
        journal(session_id),
        history(session_id),
        ops(session_id),
    ]
