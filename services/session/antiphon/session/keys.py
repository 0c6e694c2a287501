"""Redis key layout. One owner of every key name.

Per-session keys carry the hash tag `{<session_id>}` so that all of one
session's keys land in one Redis Cluster slot and multi-key Lua scripts
stay legal there.
"""

from __future__ import annotations

ADMITTED = "ap:admitted"


def session(session_id: str) -> str:
    return f"ap:{{{session_id}}}:session"


def owner(session_id: str) -> str:
    return f"ap:{{{session_id}}}:owner"


def journal(session_id: str) -> str:
    return f"ap:{{{session_id}}}:journal"


def history(session_id: str) -> str:
    return f"ap:{{{session_id}}}:history"
