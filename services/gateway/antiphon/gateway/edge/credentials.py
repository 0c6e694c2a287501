"""API keys, held only as sha256 hashes, and where a request carries its credential.

The keys come from the `api_key` setting and from `api_keys_file`: one key a
line, blank lines and `#` comments ignored, and a line `sha256:<64 hex>`
taken as a key given by its hash, so the file itself need not hold the
plaintext. A presented key is hashed and compared with every stored hash by
`hmac.compare_digest`, all of them, so the time taken says nothing about
which key came close.

A key's id is a prefix of its hash: it names the key in per-key limits,
in client secrets and in logs, and reveals nothing usable of a random key.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

HASH_PREFIX = "sha256:"
_HEX64 = re.compile(r"[0-9a-f]{64}")
KEY_ID_CHARS = 16
# OpenAI's convention for browsers, which cannot set headers on a WebSocket.
SUBPROTOCOL_PREFIX = "openai-insecure-api-key."


def key_hash(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


def key_id(digest: bytes) -> str:
    return digest.hex()[:KEY_ID_CHARS]


class KeyFileError(ValueError):
    """The keys file cannot be read as one key a line."""


def read_keys_file(path: Path) -> list[bytes]:
    """The hashes of the keys in `path`; the plaintext is not kept."""
    digests: list[bytes] = []
    for n, raw in enumerate(path.read_text().splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith(HASH_PREFIX):
            hexdigest = line[len(HASH_PREFIX) :].lower()
            if not _HEX64.fullmatch(hexdigest):
                raise KeyFileError(f"{path}:{n}: sha256: needs 64 hex digits")
            digests.append(bytes.fromhex(hexdigest))
        elif any(c.isspace() for c in line):
            raise KeyFileError(f"{path}:{n}: a key has no spaces (one key a line)")
        else:
            digests.append(key_hash(line))
    return digests


class KeyRing:
    """The API keys a gateway accepts; empty = no authentication."""

    def __init__(self, digests: Iterable[bytes]) -> None:
        self._digests = list(dict.fromkeys(digests))
        self._ids = frozenset(key_id(d) for d in self._digests)

    @classmethod
    def load(cls, api_key: str = "", keys_file: str = "", *extra: str) -> KeyRing:
        """The single `api_key`, the keys of `keys_file` and any `extra` keys."""
        digests = [key_hash(k) for k in (api_key, *extra) if k]
        if keys_file:
            digests.extend(read_keys_file(Path(keys_file)))
        return cls(digests)

    def __bool__(self) -> bool:
        return bool(self._digests)

    def __len__(self) -> int:
        return len(self._digests)

    def match(self, presented: str) -> str | None:
        """The id of the key `presented` is, or None."""
        digest = key_hash(presented)
        found: str | None = None
        for stored in self._digests:
            if hmac.compare_digest(stored, digest):
                found = key_id(stored)
        return found

    def has_id(self, kid: str) -> bool:
        """Whether a key of this id is still configured (its secrets die with it)."""
        return kid in self._ids


def presented(headers: Mapping[str, str], subprotocols: Sequence[str] = ()) -> str | None:
    """The credential of a request: `Authorization: Bearer <it>`, else (for a
    WebSocket from a browser) the subprotocol `openai-insecure-api-key.<it>`."""
    header = headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    for proto in subprotocols:
        if proto.startswith(SUBPROTOCOL_PREFIX) and len(proto) > len(SUBPROTOCOL_PREFIX):
            return proto[len(SUBPROTOCOL_PREFIX) :]
    return None
