"""Client secrets (`ek_...`): short-lived, stateless, signed by the gateway.

A secret carries everything needed to accept it, so any gateway replica
holding the same signing key accepts it without a shared store: its expiry,
the id of the API key that minted it (it counts against that key's limits,
and dies with that key) and the session config its minter set. The layout is
`ek_<body>.<mac>`: body = base64url(zlib(JSON)), mac = base64url(HMAC-SHA256
over a domain tag and the body). Both parts use only characters an HTTP
token allows, so the secret fits in a WebSocket subprotocol.

Without a configured signing key each process draws its own at start: its
secrets work only on the replica that minted them, and not after a restart.

`parse_request` reads OpenAI's request (`expires_after: {anchor, seconds}`,
`session`) and refuses bad input with the `ClientSecretError` it maps to a
400 in OpenAI's error shape.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import secrets
import time
import zlib
from dataclasses import dataclass, field
from typing import Any

from antiphon.common.audio_formats import PCM16
from antiphon.common.ids import new_id
from antiphon.gateway.errors import ClientError
from antiphon.gateway.translate.session_patch import session_patch

PREFIX = "ek_"
VERSION = 1
_TAG = b"antiphon-client-secret/v1."
# OpenAI's bounds on `expires_after.seconds`, and its default.
MIN_TTL_S = 10
MAX_TTL_S = 7200
DEFAULT_TTL_S = 600
# A secret travels in a header (a subprotocol); servers cap a header line
# near 8 KiB, so a session config too large for that is refused at minting.
MAX_SECRET_CHARS = 6000
# A decompressed body is never larger than this (only after its MAC passed).
_MAX_BODY_BYTES = 64 * 1024


@dataclass(frozen=True)
class ClientSecretError(Exception):
    """A refused client_secrets request: OpenAI's 400 `invalid_request_error`."""

    code: str
    message: str
    param: str = ""


@dataclass(frozen=True)
class SecretRequest:
    ttl_s: int
    session: dict[str, Any]


@dataclass(frozen=True)
class Secret:
    """A verified secret: who minted it, until when, and the session it sets."""

    key_id: str
    expires_at: int
    session: dict[str, Any] = field(default_factory=dict)


class SecretInvalid(Exception):
    """Not a secret this gateway minted (forged, altered, another signing key)."""


class SecretExpired(Exception):
    """A genuine secret past its `expires_at`."""


def signing_key(configured: str) -> bytes:
    """The HMAC key: derived from the setting (any length), else random per process."""
    if configured:
        return hashlib.sha256(b"antiphon-signing-key." + configured.encode()).digest()
    return secrets.token_bytes(32)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class SecretSigner:
    def __init__(self, key: bytes) -> None:
        self._key = key

    def _mac(self, body: str) -> str:
        return _b64(hmac.new(self._key, _TAG + body.encode(), hashlib.sha256).digest())

    def mint(
        self, key_id: str, ttl_s: int, session: dict[str, Any], now: float | None = None
    ) -> tuple[str, int]:
        """The secret's value and its `expires_at` (unix seconds)."""
        issued = int(time.time() if now is None else now)
        expires_at = issued + ttl_s
        payload = {
            "v": VERSION,
            "kid": key_id,
            "iat": issued,
            "exp": expires_at,
            # Two secrets minted in the same second still differ.
            "jti": secrets.token_urlsafe(9),
            "session": session,
        }
        raw = json.dumps(payload, separators=(",", ":"), sort_keys=True).encode()
        body = _b64(zlib.compress(raw, 9))
        value = f"{PREFIX}{body}.{self._mac(body)}"
        if len(value) > MAX_SECRET_CHARS:
            raise ClientSecretError(
                "invalid_value",
                f"the session config makes a secret of {len(value)} characters; "
                f"a client secret is limited to {MAX_SECRET_CHARS}",
                "session",
            )
        return value, expires_at

    def verify(self, value: str, now: float | None = None) -> Secret:
        """The secret `value` is; raises SecretInvalid or SecretExpired."""
        if not value.startswith(PREFIX) or "." not in value:
            raise SecretInvalid("not a client secret")
        body, _, mac = value[len(PREFIX) :].rpartition(".")
        if not hmac.compare_digest(mac.encode(), self._mac(body).encode()):
            raise SecretInvalid("bad signature")
        try:
            inflate = zlib.decompressobj()
            raw = inflate.decompress(_unb64(body), _MAX_BODY_BYTES)
            payload = json.loads(raw)
        except (binascii.Error, zlib.error, ValueError) as exc:
            raise SecretInvalid("unreadable body") from exc
        if not isinstance(payload, dict) or payload.get("v") != VERSION:
            raise SecretInvalid("unknown version")
        kid, exp, session = payload.get("kid"), payload.get("exp"), payload.get("session")
        if not isinstance(kid, str) or not isinstance(exp, int) or not isinstance(session, dict):
            raise SecretInvalid("malformed payload")
        if (time.time() if now is None else now) >= exp:
            raise SecretExpired(f"expired at {exp}")
        return Secret(key_id=kid, expires_at=exp, session=session)


def parse_request(body: Any) -> SecretRequest:
    """OpenAI's `POST /v1/realtime/client_secrets` body; raises ClientSecretError."""
    if body is None:
        body = {}
    if not isinstance(body, dict):
        raise ClientSecretError("invalid_type", "the request body must be a JSON object")
    expires = body.get("expires_after")
    ttl = DEFAULT_TTL_S
    if expires is not None:
        if not isinstance(expires, dict):
            raise ClientSecretError(
                "invalid_type", "`expires_after` must be an object", "expires_after"
            )
        anchor = expires.get("anchor", "created_at")
        if anchor != "created_at":
            raise ClientSecretError(
                "invalid_value",
                f"expires_after.anchor {anchor!r} is not supported; use 'created_at'",
                "expires_after.anchor",
            )
        seconds = expires.get("seconds", DEFAULT_TTL_S)
        if not isinstance(seconds, int) or isinstance(seconds, bool):
            raise ClientSecretError(
                "invalid_type", "expires_after.seconds must be an integer", "expires_after.seconds"
            )
        if not MIN_TTL_S <= seconds <= MAX_TTL_S:
            raise ClientSecretError(
                "integer_out_of_range",
                f"expires_after.seconds must be between {MIN_TTL_S} and {MAX_TTL_S}",
                "expires_after.seconds",
            )
        ttl = seconds
    session = body.get("session")
    if session is None:
        session = {}
    if not isinstance(session, dict):
        raise ClientSecretError("invalid_type", "`session` must be an object", "session")
    try:
        # The same reading as a `session.update`, so a config no session would
        # take is refused now, not when a browser opens with it.
        session_patch({"session": session}, PCM16)
    except ClientError as err:
        raise ClientSecretError(err.code, err.message, err.param) from err
    return SecretRequest(ttl_s=ttl, session=session)


def response(value: str, expires_at: int, session: dict[str, Any]) -> dict[str, Any]:
    """OpenAI's answer: the secret, its expiry, and the session it configures
    (a `realtime.session` object, with an id as OpenAI gives one; each
    session opened with the secret gets its own)."""
    config = {**session, "type": "realtime", "object": "realtime.session", "id": new_id("sess")}
    return {"value": value, "expires_at": expires_at, "session": config}
