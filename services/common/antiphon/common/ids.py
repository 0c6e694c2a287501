"""Identifier formats shared by every tier."""

from __future__ import annotations

import secrets


def new_id(prefix: str) -> str:
    """`<prefix>_<24 hex>`: unique without coordination, safe in Redis keys."""
    return f"{prefix}_{secrets.token_hex(12)}"
