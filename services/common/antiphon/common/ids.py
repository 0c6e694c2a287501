"""Identifier formats shared by every tier."""

from __future__ import annotations

import re
import secrets

# Client-chosen session ids become part of Redis keys (`ap:{<id>}:...`): no
# braces (the hash tag must be the whole id), nothing empty, bounded length.
_SESSION_ID = re.compile(r"[A-Za-z0-9_.:-]{1,128}")


def new_id(prefix: str) -> str:
    """`<prefix>_<24 hex>`: unique without coordination, safe in Redis keys."""
    return f"{prefix}_{secrets.token_hex(12)}"


def valid_session_id(session_id: str) -> bool:
    return _SESSION_ID.fullmatch(session_id) is not None
