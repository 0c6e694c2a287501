"""Who may open a socket or mint a secret: Origin, credential, per-key limits.

Every check runs on the request's headers alone, before a WebSocket is
accepted or a session exists, and each refusal is one `Refusal`: the HTTP
status of the upgrade (401, 403, 429), OpenAI's error JSON, and the reason
the refusal metric counts it under. No refusal message repeats what the
client sent as its credential.

With no API key configured, authentication is off: any credential that is
not a client secret is ignored (stock SDKs always send one), and a client
secret minted without a key still applies its session config. A secret
that is expired or not ours is refused either way.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from antiphon.gateway.edge.client_secrets import PREFIX, SecretExpired, SecretInvalid, SecretSigner
from antiphon.gateway.edge.credentials import KeyRing, presented
from antiphon.gateway.edge.key_limits import KeyLimits, Lease, LimitExceeded
from antiphon.gateway.edge.pinned import PinnedConfig
from antiphon.gateway.errors import ClientError

Reason = Literal[
    "origin",
    "missing_credential",
    "invalid_credential",
    "expired_secret",
    "key_session_limit",
    "key_rate_limit",
    "invalid_request",
    "call_limit",
]
Via = Literal["none", "api_key", "client_secret"]


@dataclass(frozen=True)
class Refusal(Exception):
    status: int
    type: str
    code: str
    message: str
    reason: Reason
    param: str = ""

    def body(self) -> dict[str, Any]:
        """OpenAI's REST error shape."""
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param or None,
                "code": self.code,
            }
        }


@dataclass(frozen=True)
class Principal:
    """Who is asking: the id of their key ("" with auth off) and, for a
    client secret, the session config it pins."""

    key_id: str
    via: Via
    pinned: PinnedConfig | None = None


_MISSING = Refusal(
    401,
    "invalid_request_error",
    "missing_api_key",
    "no API key given: send `Authorization: Bearer <key>` or, from a browser, "
    "the subprotocol `openai-insecure-api-key.<key or client secret>`",
    "missing_credential",
)
_INVALID = Refusal(
    401, "invalid_request_error", "invalid_api_key", "incorrect API key", "invalid_credential"
)


def _normal_origin(origin: str) -> str:
    return origin.strip().rstrip("/").lower()


class Gate:
    def __init__(
        self,
        keys: KeyRing,
        signer: SecretSigner,
        limits: KeyLimits,
        origins: Iterable[str] = (),
    ) -> None:
        self.keys = keys
        self.signer = signer
        self.limits = limits
        self._origins = frozenset(_normal_origin(o) for o in origins if o.strip())

    @property
    def auth_enabled(self) -> bool:
        return bool(self.keys)

    def check_origin(self, headers: Mapping[str, str]) -> None:
        """A browser's request from an Origin not on the list is refused; a
        request without an Origin (not a browser) is not the list's business."""
        origin = headers.get("origin")
        if not self._origins or origin is None or "*" in self._origins:
            return
        if _normal_origin(origin) not in self._origins:
            raise Refusal(
                403,
                "invalid_request_error",
                "origin_not_allowed",
                "this Origin is not allowed to use this gateway",
                "origin",
            )

    def authenticate(
        self,
        headers: Mapping[str, str],
        subprotocols: Sequence[str] = (),
        *,
        secrets_allowed: bool,
    ) -> Principal:
        """The principal of a request; raises Refusal (401)."""
        credential = presented(headers, subprotocols)
        if credential is not None and credential.startswith(PREFIX):
            if not secrets_allowed:
                raise Refusal(
                    401,
                    "invalid_request_error",
                    "invalid_api_key",
                    "a client secret opens sessions only; this needs an API key",
                    "invalid_credential",
                )
            return self._secret(credential)
        if not self.auth_enabled:
            return Principal("", "none")
        if credential is None:
            raise _MISSING
        kid = self.keys.match(credential)
        if kid is None:
            raise _INVALID
        return Principal(kid, "api_key")

    def _secret(self, value: str) -> Principal:
        try:
            secret = self.signer.verify(value)
        except SecretExpired as exc:
            raise Refusal(
                401,
                "invalid_request_error",
                "client_secret_expired",
                "the client secret has expired: mint a new one",
                "expired_secret",
            ) from exc
        except SecretInvalid as exc:
            raise _INVALID from exc
        # A secret dies with the key that minted it; one minted with auth
        # off names no key and is void once keys are configured.
        if self.auth_enabled and not self.keys.has_id(secret.key_id):
            raise _INVALID
        try:
            pinned = PinnedConfig.from_session(secret.session) if secret.session else None
        except ClientError as exc:
            # Minted by a gateway whose reading of a session config differs.
            raise _INVALID from exc
        return Principal(secret.key_id, "client_secret", pinned)

    def admit(self, principal: Principal) -> Lease:
        """A lease on one more session of the principal's key; raises Refusal (429).
        Without a key (auth off) there is nothing to count against."""
        if not principal.key_id:
            return Lease(None, "")
        try:
            return self.limits.admit(principal.key_id)
        except LimitExceeded as exc:
            raise Refusal(429, "rate_limit_error", exc.code, exc.message, exc.code) from exc
